"""What a run of any backend hands back: its event-log tables, its length, backend facts, and whether
it counts as complete. One rule for every backend (`verdict`): a run is complete only when its
drain finished and its accounting balances; `testbed.experiment.execute` marks the manifest."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional


@dataclass
class RunResult:
    tables: Dict[str, Dict[str, list]]
    duration_s: float
    details: Dict[str, Any] = field(default_factory=dict)  # for the manifest (live: accounting, images)
    incomplete: Optional[str] = None  # why the run is not complete (one line); None: complete


def verdict(undrained: Optional[str] = None, imbalances: Optional[Mapping[str, float]] = None,
            fault: Optional[str] = None) -> Optional[str]:
    """The reason a run is incomplete, None if it is complete: a fault that ended it early, a drain
    that did not finish (`undrained` says what is left), or an accounting whose named differences
    (which must all be 0) are not."""
    reasons = [r for r in (fault, undrained) if r]
    off = {name: value for name, value in (imbalances or {}).items() if value != 0}
    if off:
        reasons.append("accounting does not balance: " + ", ".join(f"{k} = {v:+g}" for k, v in off.items()))
    return "; ".join(reasons) or None
