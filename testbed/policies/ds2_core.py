"""DS2's scaling model (Kalavri et al., OSDI 2018; docs/ds2.md): from one observation window's
instrumentation, the optimal parallelism of every operator of a dataflow, pure arithmetic.

Per instance k of operator i, over the window: useful time W_u (time spent processing, not waiting
for input or output), records processed R_prc. The true processing rate of i is the sum of its
instances' rates R_prc / W_u, the rate i would reach if it never waited; its true output rate
along an edge is that rate times the fraction of processed records pushed along the edge
(records pushed / records processed), i.e. records pushed / useful time.

In topological order, with the sources at their target rates, operator i's target input is what its
upstream operators push when they themselves run at their optimal parallelism:

    input_i = sum over edges (j, i) of: source j's target rate, or input_j * pushed_ji / processed_j
    pi_i    = ceil(input_i / (true processing rate of i / instances of i) * (1 + over-provisioning))

The upstream term input_j * pushed_ji / processed_j is the paper's true output rate of j per
instance times j's optimal parallelism, taken before rounding (the authors' controller does the
same), so a rounded-up upstream does not inflate its downstream's estimate."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

EPS = 1e-9  # tolerance of the ceiling: 4.000000001 instances are 4, not 5

Edge = Tuple[str, str]


@dataclass(frozen=True)
class InstanceWindow:
    """One instance over the window: records processed and useful time in seconds."""

    processed: float
    useful_s: float

    @property
    def measured(self) -> bool:
        return self.useful_s > 0 and self.processed > 0


@dataclass(frozen=True)
class VertexWindow:
    """One operator over the window: its instances now, what each measured instance did, and the
    records it pushed along each of its outgoing edges (keyed by the downstream operator)."""

    name: str
    parallelism: int
    instances: Tuple[InstanceWindow, ...]
    pushed: Mapping[str, float] = field(default_factory=dict)
    window_s: float = 1.0

    def measured(self) -> Tuple[InstanceWindow, ...]:
        return tuple(k for k in self.instances if k.measured)

    def processed(self) -> float:
        return sum(k.processed for k in self.instances)

    def true_processing_rate(self) -> Optional[float]:
        """Records/s of all measured instances at full utilisation; None: nothing measured."""
        measured = self.measured()
        return sum(k.processed / k.useful_s for k in measured) if measured else None

    def rate_per_instance(self) -> Optional[float]:
        total = self.true_processing_rate()
        return None if total is None else total / len(self.measured())

    def true_output_rate(self, downstream: str) -> Optional[float]:
        """Records/s pushed to `downstream` per second of useful time (all instances together)."""
        total = self.true_processing_rate()
        processed = self.processed()
        if total is None or processed <= 0:
            return None
        return total * self.pushed.get(downstream, 0.0) / processed


@dataclass(frozen=True)
class Estimate:
    """DS2's answer for one operator: the input rate it must sustain, its true rate per instance and
    the parallelism (None when the window measured none of its instances)."""

    name: str
    current: int
    target_input: float
    rate_per_instance: Optional[float]
    exact: Optional[float]
    n: Optional[int]


def optimal_parallelism(vertices: Sequence[VertexWindow], edges: Sequence[Edge],
                        source_rates: Mapping[Edge, float], over_provision: float = 0.0,
                        bounds: Tuple[int, int] = (1, 0)) -> Dict[str, Estimate]:
    """DS2's model over `vertices` (in topological order); `source_rates`: the target rate of each
    edge leaving a source; `bounds`: (min, max) parallelism, max 0 meaning none."""
    by_name = {v.name: v for v in vertices}
    inputs: Dict[str, float] = {}
    result: Dict[str, Estimate] = {}
    for v in vertices:
        inputs[v.name] = sum(_edge_rate(e, by_name, inputs, source_rates) for e in edges if e[1] == v.name)
        result[v.name] = _estimate(v, inputs[v.name], over_provision, bounds)
    return result


def _edge_rate(edge: Edge, by_name: Mapping[str, VertexWindow], inputs: Mapping[str, float],
               source_rates: Mapping[Edge, float]) -> float:
    """What `edge` carries when everything upstream runs at its optimal parallelism. An upstream
    without a measurement contributes what it was seen to push (nothing better is known)."""
    upstream, downstream = edge
    if upstream not in by_name:
        return source_rates.get(edge, 0.0)
    u = by_name[upstream]
    processed = u.processed()
    if processed <= 0 or not u.measured():
        return u.pushed.get(downstream, 0.0) / u.window_s
    return inputs.get(upstream, 0.0) * u.pushed.get(downstream, 0.0) / processed


def _estimate(v: VertexWindow, target_input: float, over_provision: float, bounds: Tuple[int, int]) -> Estimate:
    per_instance = v.rate_per_instance()
    if per_instance is None:
        return Estimate(v.name, v.parallelism, target_input, None, None, None)
    exact = target_input / per_instance * (1.0 + over_provision)
    return Estimate(v.name, v.parallelism, target_input, per_instance, exact, clamp(ceil(exact), bounds))


def ceil(x: float) -> int:
    return int(math.ceil(x - EPS))


def clamp(n: int, bounds: Tuple[int, int]) -> int:
    lo, hi = bounds
    n = max(n, lo)
    return min(n, hi) if hi > 0 else n
