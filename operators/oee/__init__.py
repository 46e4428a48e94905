"""The logic of the OEE topology's operators O1-O9 (docs/papers/btu-provisioning.md#operators),
one module per operator, behind the contract of ``operators.api``. The runner
(``operators/runner.py``) does transport, acks, sampling, metrics, emulated work and
dead-lettering; ``operators.registry`` maps type names to these classes.

Only the stdlib, ``redis`` and ``fpdf2`` are used here: the package goes into slim images.
"""
