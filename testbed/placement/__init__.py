"""Placement strategies: where a policy's new instances run (first fit, the BTU paper's Algorithm 2,
and the ODP integer program in `testbed.placement.odp`)."""
from testbed.placement.base import Placement, PlacementConfig, make_placement, placements, register_placement

__all__ = ["Placement", "PlacementConfig", "make_placement", "placements", "register_placement"]
