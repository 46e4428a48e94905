"""Exhaustive enumeration of placements: the reference optimum for small instances (tests, and a
check of the ILP on anything with up to ~10^5 placements)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Tuple

from testbed.placement.odp.indexed import index
from testbed.placement.odp.instance import OdpInstance
from testbed.placement.odp.metrics import PlacementMetrics, bounds, evaluate, violations


@dataclass(frozen=True)
class Enumerated:
    feasible: bool
    assignment: Optional[Tuple[int, ...]]  # node index per operator of one best placement
    metrics: Optional[PlacementMetrics]
    placements: int  # how many were enumerated


def enumerate_optimum(inst: OdpInstance, limit: int = 200_000) -> Enumerated:
    ix = index(inst)
    total = 1
    for c in ix.candidates:
        total *= len(c)
    if total > limit:
        raise ValueError(f"{total} placements exceed the enumeration limit {limit}")
    b = bounds(ix)
    best: Optional[Tuple[Tuple[int, ...], PlacementMetrics]] = None
    for assignment in itertools.product(*(c.tolist() for c in ix.candidates)):
        if violations(ix, assignment):
            continue
        metrics = evaluate(ix, assignment, b)
        if best is None or metrics.utility > best[1].utility:
            best = (assignment, metrics)
    if best is None:
        return Enumerated(False, None, None, total)
    return Enumerated(True, best[0], best[1], total)
