"""The BTU-agnostic baseline (spec §9): queue thresholds per operator type, first-fit placement,
a new host when none has room, and a host released as soon as its last instance has stopped."""
from __future__ import annotations

from typing import List

from testbed.config import PolicyConfig
from testbed.model import Action, LeaseHost, ReleaseHost, ScaleDown, ScaleUp, Snapshot
from testbed.policies.base import first_fit
from testbed.policies.planning import Plan


class ThresholdPolicy:
    name = "threshold"

    def __init__(self, cfg: PolicyConfig):
        self.cfg = cfg

    def decide(self, snapshot: Snapshot) -> List[Action]:
        cfg, plan = self.cfg, Plan(snapshot)
        actions: List[Action] = []
        for name, view in snapshot.operators.items():
            q = view.queue
            if q > cfg.up2_threshold:
                starts, reason = 2, f"queue {q} > {cfg.up2_threshold}"
            elif q > cfg.up_threshold:
                starts, reason = 1, f"queue {q} > {cfg.up_threshold}"
            else:
                starts, reason = 0, ""
            for _ in range(starts):
                host = first_fit(plan, view.type)
                if host is None:
                    if not plan.can_lease():
                        break
                    host = plan.lease()
                    actions.append(LeaseHost(host, f"no host has room for {name}: {reason}"))
                plan.place(name, host)
                actions.append(ScaleUp(name, host, reason))
            if not starts and q < cfg.down_threshold and plan.n[name] >= 2:
                found = plan.newest_instance(name)
                assert found is not None
                host, instance = found
                plan.remove(host, instance)
                actions.append(ScaleDown(name, instance, host, f"queue {q} < {cfg.down_threshold}, {plan.n[name] + 1} instances"))
        for host in plan.empty_hosts():
            actions.append(ReleaseHost(host, "no instance left on the host"))
        return actions
