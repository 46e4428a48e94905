"""The BTU paper's Algorithm 2: the host whose free CPU and memory stay most balanced after the
placement, relative to how many such instances would fit, with a bonus for a cached image
(docs/papers/btu-provisioning.md#algorithm-2-host-selection)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from testbed.model import OperatorType
from testbed.placement.base import Placement, PlacementChoice, PlacementParams, register_placement
from testbed.plan import Plan, PlanHost


@dataclass
class SuitabilityParams(PlacementParams):
    """`placement.cache_factor`."""

    cache_factor: float = 0.01  # CF (Algorithm 2): the bonus of a host caching the image

    def validate(self) -> Optional[Tuple[str, str]]:
        return ("cache_factor", "must be >= 0") if self.cache_factor < 0 else None


def host_suitability(host: PlanHost, op: OperatorType, cache_factor: float) -> float:
    """Lower is better, -1 when the instance does not fit."""
    f = min(host.cpu_free / op.cpu, host.memory_free / op.memory)
    if f < 1:
        return -1.0
    diff = abs((host.cpu_free - op.cpu) / host.cpu - (host.memory_free - op.memory) / host.memory)
    s = diff / f
    return s * cache_factor if op.name in host.images else s


class Suitability(Placement):
    name = "suitability"

    def __init__(self, cache_factor: float):
        self.cache_factor = cache_factor

    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        # ties go to the earlier-leased host (k), then the id: deterministic
        scored = [(host_suitability(h, op, self.cache_factor), k, h.id) for k, h in enumerate(plan.candidate_hosts())]
        fitting = [s for s in scored if s[0] >= 0]
        return min(fitting)[2] if fitting else None


@register_placement("suitability", SuitabilityParams)
def _make(params: SuitabilityParams, shared: PlacementChoice) -> Placement:
    return Suitability(params.cache_factor)
