"""Algorithm 1 of the Daedalus paper (docs/papers/daedalus.md#algorithm-1-scaling-decision): the
smallest scale-out that carries the current workload, recovers from the rescale within the target
time and covers the forecast; a 180 s grace after every action, a 600 s keep rule, the scale-in lag
check and MaxScaleout as the fallback."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Dict, Optional, Sequence, Union

import numpy as np

from testbed.policies.daedalus.recovery import RtSemantics, predict_recovery_time


class LagCheck(str, Enum):
    candidate = "candidate"  # paper: skip a smaller scale-out i if C(i) < lag
    current = "current"  # code: skip it if C(p_cur) < lag


@dataclass(frozen=True)
class DecisionSettings:
    max_scaleout: int = 18
    grace_s: float = 180.0
    keep_s: float = 600.0
    keep_lookahead_s: int = 60
    rt_target_s: float = 600.0
    lag_check: LagCheck = LagCheck.candidate
    rt_semantics: RtSemantics = RtSemantics.paper
    backlog_includes_lag: bool = False


@dataclass(frozen=True)
class DecisionInputs:
    t: float
    p_cur: int
    last_rescale: float  # -inf before the first action
    workload: float  # W = int(mean workload over the last 61 s)
    forecast: Union[Sequence[float], np.ndarray]  # F, 1 s steps from now on
    capacity: Callable[[int], int]  # C(p)
    lag: float
    replay: float  # Σ workload over the last K s
    downtime_out: int
    downtime_in: int


@dataclass
class Decision:
    target: Optional[int]  # None: no action this loop
    branch: str  # grace | unknown | keep | current | candidate | max
    rt: Dict[int, int] = field(default_factory=dict)  # predicted RT of every candidate examined

    @property
    def rt_target(self) -> Optional[int]:
        return self.rt.get(self.target) if self.target is not None else None


def plan(x: DecisionInputs, s: DecisionSettings) -> Decision:
    since = x.t - x.last_rescale
    if since < s.grace_s:
        return Decision(None, "grace")
    c = x.capacity
    if c(x.p_cur) == 0:
        return Decision(None, "unknown")
    f = np.asarray(x.forecast, dtype=float)
    f_max = float(f.max()) if f.size else 0.0
    w = x.workload
    if since < s.keep_s and c(x.p_cur) > w and c(x.p_cur) > (float(f[:s.keep_lookahead_s].max()) if f.size else 0.0):
        return Decision(x.p_cur, "keep")
    rts: Dict[int, int] = {}
    lag_extra = x.lag if s.backlog_includes_lag else 0.0
    for i in range(1, s.max_scaleout + 1):
        ci = c(i)
        if ci <= w:
            continue
        d = x.downtime_out if i >= x.p_cur else x.downtime_in
        rt = predict_recovery_time(ci, f, x.replay, d, lag_extra, s.rt_semantics)
        rts[i] = rt
        if rt > s.rt_target_s:
            continue
        if f.size and ci < float(f[:rt].max()):
            continue
        if i == x.p_cur:
            return Decision(i, "current", rts)
        if i < x.p_cur:
            if (ci if s.lag_check is LagCheck.candidate else c(x.p_cur)) < x.lag:
                continue
        if ci > f_max:
            return Decision(i, "candidate", rts)
    return Decision(s.max_scaleout, "max", rts)


NEVER = -math.inf
