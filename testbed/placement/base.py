"""Where new instances go: the placement strategy interface and its registry.

A policy decides *how many* instances an operator needs; a `Placement` decides *where* they run.
Both work on the policy's `Plan` (the cycle's scratch copy of the system), so a placement sees the
instances and leases decided earlier in the same cycle. Strategies are pure like policies: no clock,
no I/O. `start` places a batch (a strategy that optimises jointly, such as an integer program,
overrides it); `moves` may propose migrations (none by default).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from testbed.model import Action, LeaseHost, OperatorType, ScaleUp
from testbed.policies.planning import Plan


@dataclass
class PlacementConfig:
    """The placement strategy of a run and the strategies' parameters."""

    name: str = ""  # "" = the policy's own default (first_fit for the threshold baseline, suitability for BTU)
    cache_factor: float = 0.01  # suitability (BTU paper, Algorithm 2): CF, the bonus of a host caching the image


class Placement(ABC):
    name: str = ""

    @abstractmethod
    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        """The host for one new instance of `op` among the plan's candidate hosts; None if none fits."""

    def start(self, plan: Plan, operator: str, count: int, reason: str) -> List[Action]:
        """Place `count` new instances of `operator`, leasing a host when none has room (while the
        host limit allows). Each placement is reserved in the plan before the next is chosen."""
        actions: List[Action] = []
        op = plan.types[operator]
        for _ in range(count):
            host = self.host_for(plan, op)
            if host is None:
                if not plan.can_lease():
                    break
                host = plan.lease()
                actions.append(LeaseHost(host, f"no host has room for {operator}: {reason}"))
            plan.place(operator, host)
            actions.append(ScaleUp(operator, host, reason))
        return actions

    def moves(self, plan: Plan) -> List[Tuple[str, str, str]]:
        """Proposed migrations (instance, from host, to host); none unless a strategy rebalances."""
        return []


PlacementFactory = Callable[[PlacementConfig], Placement]
_REGISTRY: Dict[str, PlacementFactory] = {}


def register_placement(name: str) -> Callable[[PlacementFactory], PlacementFactory]:
    def add(factory: PlacementFactory) -> PlacementFactory:
        _REGISTRY[name] = factory
        return factory

    return add


def placements() -> Dict[str, PlacementFactory]:
    _load_builtins()
    return dict(_REGISTRY)


def make_placement(name: str, cfg: PlacementConfig) -> Placement:
    known = placements()
    if name not in known:
        raise KeyError(f"unknown placement {name!r}; known: {sorted(known)}")
    return known[name](cfg)


def _load_builtins() -> None:
    from testbed.placement import first_fit, suitability  # noqa: F401  (they register themselves)
