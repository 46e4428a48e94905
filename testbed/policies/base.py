"""What every policy shares: the interface (re-exported from the registry) and the deployment every
run starts from."""
from __future__ import annotations

from typing import List

from testbed.model import Action, LeaseHost, ScaleUp, Snapshot
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.registry import Policy, make_policy

__all__ = ["Policy", "initial_deployment", "make_policy"]


INITIAL_DEPLOYMENT = "initial deployment"  # the reason of the start's actions (reports tell them from the policy's)


def initial_deployment(snapshot: Snapshot, instances_per_type: int = 1) -> List[Action]:
    """The deployment every run starts from: instances of each type, first fit on new hosts."""
    plan, actions, first_fit = Plan(snapshot), [], FirstFit()  # type: tuple[Plan, List[Action], FirstFit]
    for name, view in snapshot.operators.items():
        for _ in range(instances_per_type):
            host = first_fit.host_for(plan, view.type)
            if host is None:
                host = plan.lease()
                actions.append(LeaseHost(host, INITIAL_DEPLOYMENT))
            plan.place(name, host)
            actions.append(ScaleUp(name, host, INITIAL_DEPLOYMENT))
    return actions
