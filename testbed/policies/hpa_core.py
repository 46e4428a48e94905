"""The Kubernetes Horizontal Pod Autoscaler's replica computation (autoscaling/v2), as Kubernetes
implements it (docs/papers/daedalus.md#kubernetes-hpa): the recommendation from utilisation relative
to the request with the tolerance and the handling of missing and unready pods
(replica_calculator.go), then the stabilisation windows and the rate-limit policies
(horizontal.go: stabilizeRecommendationWithBehaviors, convertDesiredReplicasWithBehaviorRate).

Pure: every input is an argument; the controller's memory (recommendations and scale events) is
explicit state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class PodMetric:
    usage: Optional[float]  # CPU usage / CPU request (1.0 = 100 % of the request); None: no metric
    ready: bool = True


def utilisation_pct(usages: Sequence[float]) -> int:
    """Kubernetes' integer utilisation: int(Σ usage · 100 / Σ request), requests all equal."""
    return int(sum(usages) * 100 / len(usages)) if usages else 0


def recommend(current: int, pods: Sequence[PodMetric], target_pct: int, tolerance: float = 0.1) -> int:
    """Replicas for a CPU utilisation target (GetResourceReplicas)."""
    ready = [p.usage for p in pods if p.ready and p.usage is not None]
    unready = [p for p in pods if not p.ready and p.usage is not None]
    missing = [p for p in pods if p.usage is None]
    if not ready:
        return current  # no metrics: Kubernetes reports an error and does not scale
    ratio = utilisation_pct(ready) / target_pct
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * len(ready))
    usages = list(ready)
    if missing:
        if ratio < 1.0:  # scaling in: missing pods count as using their whole request (or the target if above)
            usages += [max(target_pct / 100.0, 1.0)] * len(missing)
        elif ratio > 1.0:  # scaling out: missing pods count as idle
            usages += [0.0] * len(missing)
    if scale_up_with_unready:
        usages += [0.0] * len(unready)
    new_ratio = utilisation_pct(usages) / target_pct
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    new = math.ceil(new_ratio * len(usages))
    if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
        return current
    return new


@dataclass(frozen=True)
class ScalingPolicy:
    kind: str  # "pods" | "percent"
    value: int
    period_s: float


@dataclass
class HpaBehaviour:
    up_window_s: float = 300.0  # Kubernetes' default is 0; the paper's chart sets 300
    down_window_s: float = 300.0
    up_policies: Tuple[ScalingPolicy, ...] = (ScalingPolicy("percent", 100, 15.0), ScalingPolicy("pods", 4, 15.0))
    down_policies: Tuple[ScalingPolicy, ...] = (ScalingPolicy("percent", 100, 15.0),)
    min_replicas: int = 1
    max_replicas: int = 18


@dataclass
class HpaState:
    recommendations: List[Tuple[float, int]] = field(default_factory=list)  # (time, raw recommendation)
    events: List[Tuple[float, int]] = field(default_factory=list)  # (time, replica change)


def _changed_in_period(events: Sequence[Tuple[float, int]], now: float, period_s: float, up: bool) -> int:
    cutoff = now - period_s
    return sum(abs(d) for t, d in events if t > cutoff and (d > 0) == up)


def stabilise(state: HpaState, b: HpaBehaviour, now: float, current: int, desired: int) -> int:
    """min of the recommendations in the up window, max of those in the down window, then stored."""
    up = down = desired
    for t, rec in state.recommendations:
        if t > now - b.up_window_s:
            up = min(up, rec)
        if t > now - b.down_window_s:
            down = max(down, rec)
    out = current
    if out < up:
        out = up
    if out > down:
        out = down
    keep = max(b.up_window_s, b.down_window_s)
    state.recommendations = [(t, r) for t, r in state.recommendations if t > now - keep]
    state.recommendations.append((now, desired))
    return out


def rate_limit(state: HpaState, b: HpaBehaviour, now: float, current: int, desired: int) -> int:
    """The scale-up/down policies (selectPolicy Max: the policy allowing the largest change)."""
    if desired > current:
        limit = -math.inf
        for p in b.up_policies:
            start = current - _changed_in_period(state.events, now, p.period_s, True) \
                + _changed_in_period(state.events, now, p.period_s, False)
            proposed = start + p.value if p.kind == "pods" else math.ceil(start * (1 + p.value / 100))
            limit = max(limit, proposed)
        limit = max(limit, current)
        return int(min(desired, limit, b.max_replicas))
    if desired < current:
        limit = math.inf
        for p in b.down_policies:
            start = current + _changed_in_period(state.events, now, p.period_s, False) \
                - _changed_in_period(state.events, now, p.period_s, True)
            proposed = start - p.value if p.kind == "pods" else int(start * (1 - p.value / 100))
            limit = min(limit, proposed)
        limit = min(limit, current)
        return int(max(desired, limit, b.min_replicas))
    return desired


def sync(state: HpaState, b: HpaBehaviour, now: float, current: int, pods: Sequence[PodMetric],
         target_pct: int, tolerance: float = 0.1) -> Tuple[int, int]:
    """One sync period: (raw recommendation, replicas to set). A change is remembered as a scale event."""
    raw = recommend(current, pods, target_pct, tolerance)
    stabilised = stabilise(state, b, now, current, raw)
    desired = rate_limit(state, b, now, current, stabilised)
    if desired != current:
        state.events = [(t, d) for t, d in state.events if t > now - 3600]
        state.events.append((now, desired - current))
    return raw, desired
