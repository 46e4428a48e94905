"""Fidelity of the simulator against the published evaluation: the unknowns it needs (parameters),
the distance to the published tables, calibration on one pattern and the sensitivity sweeps."""
