"""A static deployment of n workers, never rescaled (docs/papers/daedalus.md#static): the Daedalus
evaluation's `static-12`. Registered as `static_n` (`static` is the ODP experiments' fixed
deployment of hosts and instances, testbed/policies/static.py).

Job mode: the job runs with `workers` from the start. Operator mode: every operator type is brought
to `workers` instances and kept there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from testbed.model import Action, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy
from testbed.policies.scaling import realise, target_of


@dataclass
class StaticNParams:
    workers: int = 12

    def validate(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {self.workers}")


@register_policy("static_n", StaticNParams, billing="rebill", placement="first_fit")
class StaticNPolicy(Policy):
    name = "static_n"
    interval_s = None  # job mode: never asked (the job keeps its initial workers)

    def __init__(self, params: StaticNParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement or FirstFit()

    def initial_parallelism(self, max_scaleout: int) -> int:
        return min(self.params.workers, max_scaleout)

    def decide(self, snapshot: Snapshot) -> List[Action]:
        plan, actions = Plan(snapshot), []
        for name in snapshot.operators:
            target = target_of(name, plan.n[name], self.params.workers, f"static: {self.params.workers} instances")
            if target is not None:
                actions += realise(plan, target, self.placement)
        return actions
