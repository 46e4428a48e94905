"""The Flink autoscaler's per-vertex decision (the Apache Flink Kubernetes Operator's module
flink-autoscaler: ScalingMetricEvaluator, JobVertexScaler, ScalingExecutor), rewritten as pure
functions over evaluated metrics (docs/flink-autoscaler.md).

Per vertex, from the metrics averaged over the metric window:

* true processing rate = records in per second / busy fraction (infinite when nothing came in);
* target data rate: a source's arrival rate, a downstream vertex's the sum over its inputs of the
  input's target rate times the edge's output ratio; the catch-up rate likewise (a source's backlog
  over the catch-up duration);
* target capacity = catch-up rate + target rate * restart time / catch-up duration + target rate /
  utilisation, rounded to a whole rate;
* the boundary: the scale-up threshold is the capacity at target + boundary (without the restart
  term), the scale-down threshold the capacity at target - boundary (with it); while a source's
  backlog exceeds the lag threshold the bounds are [0, 1];
* scale factor = capacity / true rate, capped to [1 - max down, 1 + max up]; the parallelism
  ceil(factor * current) within [min, max] and the key groups, aligned to them;
* a scale-down waits out the scale-down interval and then takes the highest recommendation of that
  interval; a scale-up following an ineffective scale-up is reported (and blocked when enabled).

The state (the last scaling per vertex, the delayed scale-downs) is explicit, so every function is a
function of its arguments.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

BALANCED, EVENLY_SPREAD, OFF = "BALANCED", "EVENLY_SPREAD", "OFF"
ALIGNMENT_MODES = (BALANCED, EVENLY_SPREAD, OFF)


@dataclass(frozen=True)
class Settings:
    """The options the decision reads (defaults: AutoScalerOptions')."""

    target_utilisation: float = 0.7
    utilisation_boundary: float = 0.3
    utilisation_max: Optional[float] = None  # None: target + boundary
    utilisation_min: Optional[float] = None  # None: target - boundary
    catch_up_s: float = 1800.0
    max_scale_up_factor: float = 100000.0
    max_scale_down_factor: float = 0.6
    scale_down_interval_s: float = 3600.0
    min_parallelism: int = 1
    max_parallelism: int = 200
    effectiveness_detection: bool = False
    effectiveness_threshold: float = 0.1
    alignment: str = BALANCED


@dataclass(frozen=True)
class Evaluated:
    """One vertex's evaluated metrics (ScalingMetricEvaluator's output)."""

    parallelism: int
    target_rate: float  # records/s the vertex must take at steady state
    catch_up_rate: float  # records/s of backlog to work off within the catch-up duration
    true_rate: float  # records/s the vertex could process at full busy time
    key_groups: int = 128  # the vertex's max parallelism (key groups)
    keyed: bool = False  # a keyBy input: the parallelism is aligned to the key groups
    backlog: bool = False  # a source's backlog exceeds the lag threshold


@dataclass(frozen=True)
class Summary:
    """A vertex's last scaling (ScalingSummary): what it had, what it got, what was expected."""

    current: int
    new: int
    true_rate: float
    expected_rate: float


@dataclass
class DelayedScaleDown:
    """A vertex's pending scale-down: when it was first asked for, the recommendations since
    (time, parallelism, outside the bound), each later one lower than the ones kept before it."""

    first: float
    recommendations: List[Tuple[float, int, bool]] = field(default_factory=list)

    def record(self, now: float, n: int, outside: bool) -> None:
        while self.recommendations and self.recommendations[-1][1] <= n:
            self.recommendations.pop()
        self.recommendations.append((now, n, outside))

    def highest_since(self, start: float) -> Tuple[int, bool]:
        self.recommendations = [r for r in self.recommendations if r[0] >= start]
        _, n, outside = self.recommendations[0]
        return n, outside


@dataclass(frozen=True)
class Change:
    """A vertex's decision: the new parallelism (= current: no change), whether its rate is outside
    the utilisation bound, and why."""

    current: int
    new: int
    outside: bool
    reason: str

    @property
    def changed(self) -> bool:
        return self.new != self.current


def target_capacity(s: Settings, e: Evaluated, utilisation: float, restart_s: float, with_restart: bool) -> float:
    """The processing capacity needed at `utilisation` (AutoScalerUtils' rule); rounded half up."""
    if math.isnan(e.catch_up_rate) or math.isnan(e.target_rate):
        return math.nan
    utilisation = min(1.0, max(0.0, utilisation))
    if utilisation == 0:
        return math.inf
    restart = 0.0 if not with_restart or s.catch_up_s == 0 else e.target_rate * restart_s / s.catch_up_s
    return float(math.floor(e.catch_up_rate + restart + e.target_rate / utilisation + 0.5))


def bounds(s: Settings) -> Tuple[float, float]:
    """(upper, lower) utilisation: utilization.max/min when set, else target +- boundary."""
    upper = s.target_utilisation + s.utilisation_boundary if s.utilisation_max is None else s.utilisation_max
    lower = s.target_utilisation - s.utilisation_boundary if s.utilisation_min is None else s.utilisation_min
    return upper, lower


def thresholds(s: Settings, e: Evaluated, restart_s: float) -> Tuple[float, float]:
    """(scale-up threshold, scale-down threshold) on the true processing rate."""
    upper, lower = (1.0, 0.0) if e.backlog else bounds(s)
    return (target_capacity(s, e, upper, restart_s, False), target_capacity(s, e, lower, restart_s, True))


def outside_bound(s: Settings, e: Evaluated, restart_s: float) -> bool:
    up, down = thresholds(s, e, restart_s)
    return e.true_rate < up or e.true_rate > down


def capped_factor(s: Settings, factor: float) -> float:
    return min(max(factor, 1.0 - s.max_scale_down_factor), 1.0 + s.max_scale_up_factor)


def align(current: int, target: int, key_groups: int, upper: int, mode: str) -> int:
    """The first parallelism from `target` on that divides the key groups (BALANCED: or that lowers
    the key groups per subtask), up to the upper limit when scaling up, up to the current count when
    scaling down; the target itself when there is none."""
    if mode == OFF:
        return target
    bound = min(key_groups, upper)
    end = bound if target > current else min(current, bound)
    for p in range(target, end + 1):
        if key_groups % p == 0 or (mode == BALANCED and key_groups // p < key_groups // target):
            return p
    return target


def scale(s: Settings, current: int, factor: float, key_groups: int, keyed: bool) -> int:
    """JobVertexScaler.scale: ceil(factor * current) within the limits, aligned to the key groups."""
    lower, upper = min(current, s.min_parallelism), max(current, s.max_parallelism)
    raw = math.ceil(factor * current) if math.isfinite(factor) else upper
    new = min(max(lower, raw), min(key_groups, upper))
    if new == current or not keyed:
        return new
    return align(current, new, key_groups, upper, s.alignment)


def ineffective(s: Settings, e: Evaluated, last: Summary) -> Optional[str]:
    """The ineffective-scaling event of a scale-up after a scale-up that achieved less than the
    threshold of the increase it expected; None when it was effective."""
    expected = last.expected_rate - last.true_rate
    actual = e.true_rate - last.true_rate
    if effective_share(actual, expected) >= s.effectiveness_threshold:
        return None
    return (f"IneffectiveScaling: expected increase {expected:.2f}, actual increase {actual:.2f}; blocking "
            f"{'enabled' if s.effectiveness_detection else 'disabled'}")


def effective_share(actual: float, expected: float) -> float:
    """actual / expected as floating point division gives it (no increase expected: any rise is
    effective, none is not)."""
    if expected != 0:
        return actual / expected
    return math.inf if actual > 0 else -math.inf


def decide(s: Settings, e: Evaluated, restart_s: float, now: float, last: Optional[Summary],
           delayed: Dict[str, DelayedScaleDown], vertex: str) -> Change:
    """computeScaleTargetParallelism for one vertex; `delayed` (the pending scale-downs) is updated."""
    p = e.parallelism
    if math.isnan(e.true_rate):
        return Change(p, p, False, "true processing rate not available")
    capacity = target_capacity(s, e, s.target_utilisation, restart_s, True)
    if math.isnan(capacity):
        return Change(p, p, False, "target data rate not available")
    factor = capped_factor(s, capacity / e.true_rate if e.true_rate > 0 else math.inf)
    new = scale(s, p, factor, e.key_groups, e.keyed)
    why = (f"target rate {e.target_rate:.1f}/s + catch-up {e.catch_up_rate:.1f}/s -> capacity {capacity:.0f}/s, "
           f"true rate {e.true_rate:.1f}/s, factor {factor:.3f}")
    if new == p:
        delayed.pop(vertex, None)
        return Change(p, p, False, why)
    outside = outside_bound(s, e, restart_s)
    if new > p:
        delayed.pop(vertex, None)
        if last is not None and p == last.new and last.new > last.current:
            event = ineffective(s, e, last)
            if event is not None and s.effectiveness_detection:
                return Change(p, p, outside, event)
            if event is not None:
                why = f"{why}; {event}"
        return Change(p, new, outside, why)
    return delay_scale_down(s, delayed, vertex, now, p, new, outside, why)


def delay_scale_down(s: Settings, delayed: Dict[str, DelayedScaleDown], vertex: str, now: float, p: int,
                     new: int, outside: bool, why: str) -> Change:
    """No scale-down before the interval since the first request; then the highest recommendation
    of the interval."""
    if s.scale_down_interval_s <= 0:
        return Change(p, new, outside, why)
    pending = delayed.setdefault(vertex, DelayedScaleDown(now))
    pending.record(now, new, outside)
    start = now - s.scale_down_interval_s
    if start < pending.first:
        return Change(p, p, False, f"{why}; scale-down to {new} delayed")
    n, out = pending.highest_since(start)
    return Change(p, n, out, f"{why}; highest recommendation of the scale-down interval {n}")


def expected_rate(e: Evaluated, new: int) -> float:
    """The processing rate a rescale to `new` is expected to give (linear in the parallelism)."""
    return e.true_rate / e.parallelism * new


def joint(changes: Dict[str, Change]) -> Dict[str, Change]:
    """ScalingExecutor: the changes are applied together when any changed vertex is outside its
    bound, else none is."""
    moved = {v: c for v, c in changes.items() if c.changed}
    return moved if any(c.outside for c in moved.values()) else {}
