"""What one monitoring interval saw, in one type both backends produce: the simulator from its
network model, the live runtime from the broker and the instances' Redis metrics. The event-log
rows of the interval and the policy's snapshot are both derived from it (testbed/monitoring.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple


@dataclass(frozen=True)
class OperatorObservation:
    received: int  # items that arrived in its queue during the interval
    processed: int
    queue: int  # items waiting at the interval's end
    dropped: Mapping[str, int] = field(default_factory=dict)  # reason -> items dropped during the interval
    duration_ms: Optional[float] = None  # mean sampled duration of the interval (None: no sample)


@dataclass(frozen=True)
class InstanceObservation:
    instance: str
    operator: str
    processed: int
    utilisation: float  # busy fraction of the interval per item slot, in [0, 1]


@dataclass(frozen=True)
class Observation:
    t: float  # the interval's end, seconds since the run's start
    interval_s: float
    input_items: int  # items the sources emitted during the interval
    operators: Mapping[str, OperatorObservation]  # in topological order
    edges: Mapping[Tuple[str, str], int]  # (source or upstream operator, operator) -> items sent
    instances: Tuple[InstanceObservation, ...] = ()

    @property
    def input_rate(self) -> float:
        return self.input_items / self.interval_s

    def utilisation(self) -> Dict[str, Optional[float]]:
        """Mean utilisation of each operator's observed instances (None: none observed)."""
        per: Dict[str, list] = {o: [] for o in self.operators}
        for i in self.instances:
            if i.operator in per:
                per[i.operator].append(i.utilisation)
        return {o: (sum(u) / len(u) if u else None) for o, u in per.items()}
