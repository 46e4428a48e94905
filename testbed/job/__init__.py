"""Job mode's one control loop (docs/architecture.md#job-mode): a job of n workers behind an engine
interface (`engine.py`), the per-second series it measures (`series.py`), the policy's input made
from them (`inputs.py`), the run's book of actions, rescales and recoveries (`ledger.py`), the loop
that measures, decides, rescales and records (`loop.py`) and the event-log tables (`tables.py`).
The simulator, the live containers and Flink each implement the engine in their own module."""
