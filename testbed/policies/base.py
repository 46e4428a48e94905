"""The policy interface: a pure function of an immutable snapshot to a list of actions."""
from __future__ import annotations

from typing import List, Protocol

from testbed.config import PolicyConfig, PolicyName
from testbed.model import Action, LeaseHost, OperatorType, ScaleUp, Snapshot
from testbed.policies.planning import Plan


class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> List[Action]:
        """Never sleeps, reads a clock or does I/O: everything it needs is in the snapshot."""
        ...


def make_policy(cfg: PolicyConfig) -> Policy:
    from testbed.policies.btu import BtuPolicy
    from testbed.policies.threshold import ThresholdPolicy

    if cfg.name == PolicyName.threshold:
        return ThresholdPolicy(cfg)
    if cfg.name == PolicyName.btu:
        return BtuPolicy(cfg)
    raise ValueError(f"policy.name: {cfg.name.value!r} is a matrix, not one policy")


def first_fit(plan: Plan, op: OperatorType) -> str | None:
    return next((h.id for h in plan.candidate_hosts() if h.fits(op)), None)


def initial_deployment(snapshot: Snapshot, instances_per_type: int = 1) -> List[Action]:
    """The deployment every run starts from: instances of each type, first fit on new hosts."""
    plan, actions = Plan(snapshot), []  # type: tuple[Plan, List[Action]]
    for name, view in snapshot.operators.items():
        for _ in range(instances_per_type):
            host = first_fit(plan, view.type)
            if host is None:
                host = plan.lease()
                actions.append(LeaseHost(host, "initial deployment"))
            plan.place(name, host)
            actions.append(ScaleUp(name, host, "initial deployment"))
    return actions
