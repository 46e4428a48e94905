"""The BTU-agnostic baseline (docs/papers/btu-provisioning.md#the-threshold-baseline): queue
thresholds per operator type, first-fit placement, a new host when none has room, and a host
released as soon as its last instance has stopped."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from testbed.model import Action, ReleaseHost, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy
from testbed.policies.scaling import scale_to


@dataclass
class ThresholdParams:
    up_threshold: int = 50  # queue > this: start one instance
    up2_threshold: int = 250  # queue > this: start two
    down_threshold: int = 1  # queue < this and n >= 2: stop one

    def validate(self) -> None:
        if not self.up_threshold < self.up2_threshold:
            raise ValueError(f"up2_threshold: must exceed up_threshold ({self.up_threshold})")


@register_policy("threshold", ThresholdParams, billing="rebill", placement="first_fit")
class ThresholdPolicy(Policy):
    name = "threshold"

    def __init__(self, cfg: ThresholdParams, placement: Optional[Placement] = None):
        self.cfg = cfg
        self.placement = placement or FirstFit()

    def decide(self, snapshot: Snapshot) -> List[Action]:
        cfg, plan = self.cfg, Plan(snapshot)
        actions: List[Action] = []
        for name, view in snapshot.operators.items():
            q, n = view.queue, plan.n[name]
            if q > cfg.up2_threshold:
                actions += scale_to(plan, name, n + 2, self.placement, f"queue {q} > {cfg.up2_threshold}")
            elif q > cfg.up_threshold:
                actions += scale_to(plan, name, n + 1, self.placement, f"queue {q} > {cfg.up_threshold}")
            elif q < cfg.down_threshold and n >= 2:
                actions += scale_to(plan, name, n - 1, self.placement,
                                    f"queue {q} < {cfg.down_threshold}, {n} instances")
        for host in plan.empty_hosts():
            actions.append(ReleaseHost(host, "no instance left on the host"))
        return actions
