"""Placement strategies: where a policy's new instances run (first fit, the BTU paper's Algorithm 2,
and the ODP integer program in `testbed.placement.odp`)."""
from testbed.placement.base import (
    Placement,
    PlacementChoice,
    PlacementParams,
    make_placement,
    placement_node,
    placements,
    register_placement,
)

__all__ = ["Placement", "PlacementChoice", "PlacementParams", "make_placement", "placement_node", "placements",
           "register_placement"]
