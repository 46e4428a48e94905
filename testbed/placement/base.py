"""Where new instances go: the placement strategy interface and its registry.

A policy decides *how many* instances an operator needs; a `Placement` decides *where* they run.
Both work on the policy's `Plan` (the cycle's scratch copy of the system), so a placement sees the
instances and leases decided earlier in the same cycle. Strategies are pure like policies: no clock,
no I/O. `start` places a batch (a strategy that optimises jointly, such as an integer program,
overrides it); `moves` may propose migrations (none by default).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from testbed.discovery import claim, discover
from testbed.model import Action, LeaseHost, OperatorType, ScaleUp
from testbed.plan import Plan


@dataclass
class OdpPlacementConfig:
    """`placement.odp.*`: the ODP integer program as a placement (docs/papers/odp.md#odp-in-the-testbed)."""

    w_r: float = 1.0  # SAW weights of response time, availability, the network term; they sum to 1
    w_a: float = 0.0
    w_z: float = 0.0
    network_objective: str = ""  # traffic | network_usage | elastic_energy; needed when w_z > 0
    solver: str = "highs"  # highs | cbc
    time_limit_s: float = 10.0  # per solve; a time-limited incumbent is used and logged as such
    mip_rel_gap: float = 1e-4
    reoptimise_all: bool = False  # placing new instances may also move existing ones (else they are pinned)
    rates_after_s: float = 100.0  # two-step S-ODP: w_a = 1 until then (no rates), then a re-solve with them


@dataclass
class PlacementConfig:
    """The placement strategy of a run and the strategies' parameters."""

    name: str = ""  # "" = the policy's own default (first_fit for the threshold baseline, suitability for BTU)
    cache_factor: float = 0.01  # suitability (BTU paper, Algorithm 2): CF, the bonus of a host caching the image
    pins: Dict[str, str] = field(default_factory=dict)  # odp, tstorm: operator -> the host (vm<k>) its instances run on
    odp: OdpPlacementConfig = field(default_factory=OdpPlacementConfig)
    tstorm_first_s: float = 100.0  # tstorm: the best-fit reassignment after the round-robin start
    tstorm_period_s: float = 300.0  # tstorm: and again every this many seconds (0: once)


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

    def start_many(self, plan: Plan, counts: Dict[str, int], reason: str) -> List[Action]:
        """New instances of several operators at once (a deployment); a strategy that optimises
        jointly (ODP) places them together, the others one operator after the other."""
        actions: List[Action] = []
        for operator, count in counts.items():
            if count > 0:
                actions += self.start(plan, operator, count, reason)
        return actions

    def moves(self, plan: Plan) -> List[Action]:
        """Proposed migrations (`Migrate` actions, already applied to the plan) of a strategy that
        reassigns periodically (ODP's second step, T-Storm); none by default. A policy that wants
        them calls this every cycle (the `static` policy does)."""
        return []

    def bind_run(self, run_cfg: Any) -> None:  # noqa: B027 - an optional hook, a no-op unless overridden
        """Facts of the run a strategy may need beside the plan (ODP: the emulated network); the
        experiment calls it once with the run's resolved config. None by default."""


PlacementFactory = Callable[[PlacementConfig], Placement]
_REGISTRY: Dict[str, PlacementFactory] = {}


def register_placement(name: str) -> Callable[[PlacementFactory], PlacementFactory]:
    def add(factory: PlacementFactory) -> PlacementFactory:
        known = _REGISTRY.get(name)
        claim("placement", name, factory.__module__, known.__module__ if known is not None else None)
        _REGISTRY[name] = factory
        return factory

    return add


def placements() -> Dict[str, PlacementFactory]:
    """Every registered strategy by name: the modules of this package that apply
    `@register_placement`, the entry points of the group `testbed.placements` and the modules named
    by `TESTBED_PLACEMENT_MODULES` (testbed/discovery.py) are imported on first use."""
    discover("testbed.placement", "register_placement", "testbed.placements", "TESTBED_PLACEMENT_MODULES")
    return dict(_REGISTRY)


def make_placement(name: str, cfg: PlacementConfig) -> Placement:
    known = placements()
    if name not in known:
        raise KeyError(f"unknown placement {name!r}; known: {sorted(known)}")
    return known[name](cfg)
