"""A fixed deployment (the ODP paper's experiments, docs/papers/odp.md#the-71-experiment): `hosts`
hosts leased at the start, a fixed number of instances per operator placed by the run's placement
strategy, no scaling. Every cycle it asks the placement for migrations (`Placement.moves`: ODP's
second step, T-Storm's periodic reassignment) and replaces instances that are missing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from testbed.model import Action, LeaseHost, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy


@dataclass
class StaticParams:
    hosts: int = 1  # leased at the start (and never released)
    instances: Dict[str, int] = field(default_factory=dict)  # per operator; operators not named get 1

    def validate(self) -> None:
        if self.hosts < 1:
            raise ValueError(f"hosts: must be >= 1, got {self.hosts}")
        for o, n in self.instances.items():
            if n < 1:
                raise ValueError(f"instances: {o} must have >= 1, got {n}")


@register_policy("static", StaticParams, billing="rebill", placement="first_fit")
class StaticPolicy(Policy):
    name = "static"

    def __init__(self, cfg: StaticParams, placement: Optional[Placement] = None):
        self.cfg = cfg
        self.placement = placement or FirstFit()

    def initial_deployment(self, snapshot: Snapshot) -> List[Action]:
        """Called at t = 0 until it returns nothing: first the hosts, then (seeing them) the instances."""
        plan = Plan(snapshot)
        missing = min(self.cfg.hosts, plan.max_hosts) - len(plan.hosts)
        if missing > 0:
            actions: List[Action] = []
            for _ in range(missing):
                actions.append(LeaseHost(plan.lease(), f"static deployment: {self.cfg.hosts} host(s)"))
            return actions
        return self._fill(plan, "static deployment")

    def decide(self, snapshot: Snapshot) -> List[Action]:
        plan = Plan(snapshot)
        return self._fill(plan, "an instance is missing") + self.placement.moves(plan)

    def _fill(self, plan: Plan, reason: str) -> List[Action]:
        counts = {o: self.cfg.instances.get(o, 1) - plan.n[o] for o in plan.types}
        return self.placement.start_many(plan, {o: c for o, c in counts.items() if c > 0}, reason)
