"""'Operator X should have n instances' as actions: new instances go where the placement strategy
says (leasing hosts as needed), surplus ones are the newest."""
from __future__ import annotations

from typing import List

from testbed.model import Action, ScaleDown
from testbed.placement.base import Placement
from testbed.policies.planning import Plan


def scale_to(plan: Plan, operator: str, n: int, placement: Placement, reason: str) -> List[Action]:
    """Actions that bring `operator` to `n` instances (at least as far as the host limit allows);
    the plan is updated, so later decisions of the same cycle see them."""
    current = plan.n[operator]
    if n > current:
        return placement.start(plan, operator, n - current, reason)
    actions: List[Action] = []
    for _ in range(current - n):
        found = plan.newest_instance(operator)
        if found is None:
            break
        host, instance = found
        plan.remove(host, instance)
        actions.append(ScaleDown(operator, instance, host, reason))
    return actions
