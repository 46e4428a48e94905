"""The book of a job-mode run: the actions it records, one row per rescale (its downtime, replay and
recovery), the workers lost and replaced, the changes given up and the measurement gaps; and the
change of the job under way, which decisions wait for."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from testbed.actions import ActionRecord
from testbed.model import Action, ScaleDown
from testbed.policies.job_inputs import JOB_OPERATOR

# the `rescales` table: one row per controller rescale, its true (simulated) or measured downtime
RESCALE_COLUMNS = ("t_s", "from_n", "to_n", "downtime_s", "replayed", "lag_before", "recovered_s",
                   "capacity_before", "capacity_after")


def new_rescales() -> Dict[str, list]:
    return {k: [] for k in RESCALE_COLUMNS}


@dataclass
class Recovery:
    """A lost worker and its replacement (a row of details.recoveries)."""

    t_s: float  # run time it was found lost (the clock's, not the rows')
    worker: str
    why: str
    replaced_by: str
    downtime_s: float = math.nan  # until the job ran at the deployed parallelism again (NaN: never)
    replayed: float = math.nan  # items the source emitted again meanwhile
    details: Dict[str, Any] = field(default_factory=dict)  # what else the engine knows of it (container, exit code)


@dataclass
class Change:
    """A change of the job under way: it is to run at `target` workers."""

    target: int
    t_s: float  # the row time it began (the rescales table's time)
    began: float  # the run time it began: a slow measurement makes the rows lag behind the clock
    deadline: float  # run time it is given up
    replayed_before: float
    rescale: Optional[int] = None  # its row in the rescales table (None: replacements only)
    recoveries: List[int] = field(default_factory=list)  # the losses whose replacements it waits for
    starts: bool = False  # it starts workers (its duration measures a start)


@dataclass
class JobLedger:
    records: List[ActionRecord] = field(default_factory=list)
    rescales: Dict[str, list] = field(default_factory=new_rescales)
    recoveries: List[Recovery] = field(default_factory=list)
    given_up: List[Dict[str, Any]] = field(default_factory=list)
    gaps: List[float] = field(default_factory=list)  # row times of seconds without a measurement
    pending: Optional[Change] = None  # the change under way
    last_change: Optional[Change] = None  # the latest change begun (pending or done)
    recovering: Optional[int] = None  # a rescale whose lag has not come back yet
    replayed: float = 0.0  # items the engine processed or emitted again after restarts, so far

    def record(self, t: float, kind: str, reason: str, instance: Optional[str] = None,
               operator: str = JOB_OPERATOR) -> None:
        self.records.append(ActionRecord(t, kind, operator, instance, None, None, reason))

    def decision(self, t: float, actions: Sequence[Action]) -> None:
        """A controller's rescale, one record per worker (per-vertex mode: per subtask of a vertex) it
        adds or removes."""
        for a in actions:
            operator = getattr(a, "operator", JOB_OPERATOR)
            self.record(t, a.kind, a.reason, a.instance if isinstance(a, ScaleDown) else None, operator)

    def open_rescale(self, t_s: float, from_n: int, to_n: int, lag_before: float, capacity_before: float,
                     capacity_after: float, downtime_s: float = math.nan, replayed: int = 0) -> int:
        """A row of the rescales table (its recovery still open); returns its index."""
        for key, value in (("t_s", t_s), ("from_n", from_n), ("to_n", to_n), ("downtime_s", downtime_s),
                           ("replayed", replayed), ("lag_before", lag_before), ("recovered_s", math.nan),
                           ("capacity_before", capacity_before), ("capacity_after", capacity_after)):
            self.rescales[key].append(value)
        return len(self.rescales["t_s"]) - 1

    def track_recovery(self, t: float, lag: float, arrivals: float) -> None:
        """A rescale has recovered once the lag is back to what it was before (or one second's arrivals)."""
        i = self.recovering
        if i is not None and lag <= max(self.rescales["lag_before"][i], arrivals):
            self.rescales["recovered_s"][i] = t - self.rescales["t_s"][i]
            self.recovering = None
