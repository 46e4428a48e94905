"""The Kubernetes Horizontal Pod Autoscaler's replica computation (autoscaling/v2) for a CPU
utilisation target, as Kubernetes' controller computes it (docs/papers/daedalus.md#kubernetes-hpa):

1. the first sync records the current replica count as a recommendation;
2. a count outside [min, max] is clamped into it, without stabilisation or rate limits;
3. otherwise the metric-based recommendation: integer utilisation over the summed millicores of
   the pods, the tolerance, missing and unready pods;
4. stabilisation: the min of the recommendations in the scale-up window, the max of those in the
   scale-down window;
5. rate limits: the scaling policies of the direction, combined by its selectPolicy.

Pure: every input is an argument; the controller's memory (recommendations and scale events) is
explicit state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PODS, PERCENT = "Pods", "Percent"
MAX, MIN, DISABLED = "Max", "Min", "Disabled"
SELECT_POLICIES = (MAX, MIN, DISABLED)
EVENT_MEMORY_S = 3600.0  # longer than any policy period (at most 1800 s), so pruning never matters


@dataclass(frozen=True)
class PodMetric:
    usage_m: Optional[int]  # CPU usage in millicores; None: no metric for the pod
    request_m: int  # CPU request in millicores (the sum of its containers')
    ready: bool = True


def millicores(cores: float) -> int:
    """A CPU reading as the HPA sees it: the metrics pipeline reports whole nanocores, which the
    controller reads in millicores rounded up."""
    nano = int(round(cores * 1e9))
    return -(-nano // 1_000_000)


def utilisation_pct(pods: Sequence[PodMetric]) -> Optional[int]:
    """Σ usage · 100 // Σ request over the pods with a metric, in integers; None if no request."""
    usage = sum(p.usage_m for p in pods if p.usage_m is not None)
    request = sum(p.request_m for p in pods if p.usage_m is not None)
    return usage * 100 // request if request > 0 else None


def usage_ratio(pods: Sequence[PodMetric], target_pct: int) -> Optional[float]:
    util = utilisation_pct(pods)
    return None if util is None else util / target_pct


def _with(pods: Sequence[PodMetric], usage_m: Callable[[PodMetric], Optional[int]]) -> List[PodMetric]:
    return [PodMetric(usage_m(p), p.request_m, p.ready) for p in pods]


def recommend(current: int, pods: Sequence[PodMetric], target_pct: int, tolerance: float = 0.1) -> Optional[int]:
    """Replicas for a CPU utilisation target; None when no ready pod has a metric (Kubernetes then
    reports an error and leaves the count alone)."""
    ready = [p for p in pods if p.ready and p.usage_m is not None]
    unready = [p for p in pods if not p.ready and p.usage_m is not None]
    missing = [p for p in pods if p.usage_m is None]
    ratio = usage_ratio(ready, target_pct)
    if ratio is None:
        return None
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * len(ready))
    # Assume the worst for the direction: missing pods at their whole request (or the target, if
    # above) when scaling in, idle when scaling out; unready pods idle when scaling out.
    filled = list(ready)
    if ratio < 1.0:
        fallback_pct = max(100, target_pct)
        filled += _with(missing, lambda p: p.request_m * fallback_pct // 100)
    elif ratio > 1.0:
        filled += _with(missing, lambda p: 0)
    if scale_up_with_unready:
        filled += _with(unready, lambda p: 0)
    new_ratio = usage_ratio(filled, target_pct)
    assert new_ratio is not None  # filled holds the ready pods, which gave a ratio
    flipped = (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio)
    if abs(1.0 - new_ratio) <= tolerance or flipped:
        return current
    new = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
        return current
    return new


@dataclass(frozen=True)
class ScalingPolicy:
    kind: str  # PODS | PERCENT
    value: int
    period_s: float


@dataclass(frozen=True)
class ScalingRules:
    window_s: float  # stabilisation window
    policies: Tuple[ScalingPolicy, ...]
    select: str = MAX  # MAX: the policy allowing the largest change; MIN: the smallest; DISABLED: none


@dataclass(frozen=True)
class HpaBehaviour:
    scale_up: ScalingRules
    scale_down: ScalingRules
    min_replicas: int = 1
    max_replicas: int = 18


# autoscaling/v2's defaults: scale out at once, by up to double or 4 pods per 15 s; scale in after
# 5 minutes of lower recommendations, by anything down to the minimum per 15 s.
V2_DEFAULTS = HpaBehaviour(
    scale_up=ScalingRules(0.0, (ScalingPolicy(PERCENT, 100, 15.0), ScalingPolicy(PODS, 4, 15.0)), MAX),
    scale_down=ScalingRules(300.0, (ScalingPolicy(PERCENT, 100, 15.0),), MAX))
# The Daedalus paper's chart: the v2 defaults with a 300 s scale-up window as well.
PAPER_CHART = replace(V2_DEFAULTS, scale_up=replace(V2_DEFAULTS.scale_up, window_s=300.0))
BEHAVIOURS: Dict[str, HpaBehaviour] = {"v2": V2_DEFAULTS, "chart": PAPER_CHART}


@dataclass
class HpaState:
    recommendations: Optional[List[Tuple[float, int]]] = None  # (time, raw recommendation); None: never synced
    events: List[Tuple[float, int]] = field(default_factory=list)  # (time, replica change)


def record_initial(state: HpaState, now: float, current: int) -> None:
    """A new HPA remembers the count it found, so it cannot scale below it within the scale-down window."""
    if state.recommendations is None:
        state.recommendations = [(now, current)]


def clamped(current: int, b: HpaBehaviour) -> Optional[int]:
    """The count a current count outside [min, max] is set to; None inside (and at 0: scaling off)."""
    if current == 0:
        return None
    if current > b.max_replicas:
        return b.max_replicas
    if current < b.min_replicas:
        return b.min_replicas
    return None


def stabilise(state: HpaState, b: HpaBehaviour, now: float, current: int, desired: int) -> int:
    """min of the recommendations in the up window, max of those in the down window; then stored."""
    recs = state.recommendations or []
    up = down = desired
    for t, rec in recs:
        if t > now - b.scale_up.window_s:
            up = min(up, rec)
        if t > now - b.scale_down.window_s:
            down = max(down, rec)
    out = min(max(current, up), down)
    keep = max(b.scale_up.window_s, b.scale_down.window_s)
    state.recommendations = [(t, r) for t, r in recs if t > now - keep] + [(now, desired)]
    return out


def _changed(events: Sequence[Tuple[float, int]], now: float, period_s: float, up: bool) -> int:
    return sum(abs(d) for t, d in events if t > now - period_s and (d > 0) == up)


def _period_start(state: HpaState, now: float, current: int, period_s: float) -> int:
    """The count at the start of the policy's period: current, less what was added, plus what was removed."""
    return current - _changed(state.events, now, period_s, True) + _changed(state.events, now, period_s, False)


def scale_up_limit(state: HpaState, rules: ScalingRules, now: float, current: int) -> int:
    if rules.select == DISABLED or not rules.policies:
        return current
    proposals = []
    for p in rules.policies:
        start = _period_start(state, now, current, p.period_s)
        # a percentage is rounded up, else a small count would never grow
        proposals.append(start + p.value if p.kind == PODS else math.ceil(start * (1 + p.value / 100)))
    return min(proposals) if rules.select == MIN else max(proposals)


def scale_down_limit(state: HpaState, rules: ScalingRules, now: float, current: int) -> int:
    if rules.select == DISABLED or not rules.policies:
        return current
    proposals = []
    for p in rules.policies:
        start = _period_start(state, now, current, p.period_s)
        proposals.append(start - p.value if p.kind == PODS else int(start * (1 - p.value / 100)))
    # the least change is the highest count when scaling in
    return max(proposals) if rules.select == MIN else min(proposals)


def rate_limit(state: HpaState, b: HpaBehaviour, now: float, current: int, desired: int) -> int:
    """The stabilised count within the direction's policies and [min, max]."""
    if desired > current:
        # events still within a period can make the limit fall below current: then hold
        ceiling = min(b.max_replicas, max(current, scale_up_limit(state, b.scale_up, now, current)))
        return min(desired, ceiling)
    if desired < current:
        floor = max(b.min_replicas, min(current, scale_down_limit(state, b.scale_down, now, current)))
        return max(desired, floor)
    return desired


def sync(state: HpaState, b: HpaBehaviour, now: float, current: int, pods: Sequence[PodMetric],
         target_pct: int, tolerance: float = 0.1) -> Tuple[Optional[int], int]:
    """One sync period: (metric-based recommendation or None, replicas to set). A change is
    remembered as a scale event."""
    record_initial(state, now, current)
    raw: Optional[int] = None
    desired = clamped(current, b)
    if desired is None:
        raw = recommend(current, pods, target_pct, tolerance) if current > 0 else None
        if raw is None:  # no metrics, or scaling off: no recommendation is stored
            return raw, current
        desired = rate_limit(state, b, now, current, stabilise(state, b, now, current, raw))
    if desired != current:
        state.events = [(t, d) for t, d in state.events if t > now - EVENT_MEMORY_S]
        state.events.append((now, desired - current))
    return raw, desired
