"""First fit: the first host, in lease order, with room (the threshold baseline's placement)."""
from __future__ import annotations

from typing import Optional

from testbed.model import OperatorType
from testbed.placement.base import Placement, PlacementChoice, register_placement
from testbed.plan import Plan


class FirstFit(Placement):
    name = "first_fit"

    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        return next((h.id for h in plan.candidate_hosts() if h.fits(op)), None)


@register_placement("first_fit")
def _make(params: None, shared: PlacementChoice) -> Placement:
    return FirstFit()
