"""What the job loop asks of an engine that runs a job of n workers, and of the clock it runs on.
The loop never reads a clock of its own: the simulator steps a virtual one, the live engines pass
the monotonic clock, unit tests a fake one."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol, Tuple

import numpy as np

from testbed.job.ledger import Change
from testbed.policies.job_inputs import JobSnapshot, VertexSnapshot


@dataclass(frozen=True)
class Second:
    """One second's measurements of the job (a row of the series)."""

    arrivals: float  # items that arrived at the source
    thr: np.ndarray  # items processed per worker slot (max scale-out long)
    cpu: np.ndarray  # CPU per worker slot as a fraction of one worker (NaN: not running)
    lag: float  # items waiting at the source at the end of the second
    uptime: float  # seconds the job has run at its deployed parallelism (0 while it restarts)
    parallel: int  # workers deployed
    running: int  # of them running


@dataclass(frozen=True)
class Loss:
    """A worker the engine lost: it is replaced, and killed first when its process still runs."""

    worker: str
    why: str
    kill: bool


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class StepClock:
    """A virtual clock that a sleep advances at once: a model's run takes no wall time."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


class JobEngine(Protocol):
    """A job of n workers that can be measured each second and rescaled."""

    def start(self, n: int) -> None:
        """Deploys the job at n workers and returns once it runs (the run's clock starts then)."""

    def observe(self, k: int) -> None:
        """Takes the measurements of run second k (ending at k + 1): what the fault checks and the
        row of the second are made from."""

    def measure(self, k: int) -> Optional[Second]:
        """The row of second k, once its faults are handled; None when nothing could be read (a gap)."""

    def parallelism(self) -> int:
        """The workers deployed (after a rescale: the new count)."""

    def ready(self, t: float) -> Dict[str, bool]:
        """Per worker of the deployment: whether it is ready at run time t (False: starting)."""

    def rescale(self, k: int, target: int) -> Optional[int]:
        """Rescales to `target` after second k; returns the rescale's row in the ledger, or None when
        the row is written later (the new workers start first)."""

    def settled(self, target: int) -> bool:
        """Whether the job runs at `target` with every worker deployed: a change is over."""

    def fatal(self, now: float) -> Optional[str]:
        """Why the run cannot go on (None: it can), from the last measurement."""

    def losses(self, now: float) -> List[Loss]:
        """Workers lost since the last measurement."""

    def replace(self, loss: Loss, now: float) -> str:
        """Removes a lost worker and starts another in its place; returns the new one's name."""

    def settle(self, change: Change, now: float, t: Optional[float]) -> None:
        """A change is over (at run time `now`, row time `t`; None after the run)."""

    def stuck(self, now: float, lost: List[str]) -> List[Loss]:
        """After a change was given up: workers (other than `lost`) that never came up."""

    def state(self) -> str:
        """What the job runs as now, for a reason (status, parallelism, workers)."""

    def change_bound_s(self) -> float:
        """How long a change (rescale or replacement) may take before it is given up."""

    def stop(self) -> None:
        """Stops everything the engine started."""


class VertexEngine(JobEngine, Protocol):
    """A job engine that sets each vertex's parallelism (per-vertex mode); its workers are the slots
    that the largest vertex needs."""

    def scalable(self) -> Tuple[str, ...]:
        """The vertices whose parallelism may be set."""

    def vertex_snapshot(self, k: int, job: JobSnapshot) -> VertexSnapshot:
        """The policy's per-vertex input at the end of second k, around the job's window `job`; each
        vertex's parallelism is what runs, as read back."""

    def rescale_vertices(self, k: int, targets: Dict[str, int]) -> Optional[int]:
        """Sets every scalable vertex's parallelism after second k (the slots started first);
        returns the rescale's row in the ledger."""
