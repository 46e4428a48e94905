"""The simulated incident process of operators whose `emission.sim` is `incident`, shared by the
cohort and the exact network models (docs/architecture.md#emission).

Live, O2 and O6 warn once per *new* incident of a machine (a defect, a temperature above the
threshold): which readings open one depends on the provider's seeded machine states, not on a fixed
ratio. The simulator does not carry readings' values, so it draws which of an operator's processed
inputs open an incident: each input independently with probability 1/`items_per_incident`, i.e.
geometric gaps between incident inputs, from the seeded stream `incident/<operator>` (nothing is
drawn for an operator in ratio mode, so other streams and ratio runs are unchanged). Every incident
input sends one item to each downstream operator, as a live warning goes to the operator's fanout.

`items_per_incident` is what a live run measures as processed / emitted of the operator
(`python -m reporting.incidents RUN_DIR`); from the provider's payload model it is 5 x
mean_defect_ticks / share_defect = 600 for O2 and 10 x (1 / excursion_per_tick +
mean_excursion_ticks) = 1030 for O6 (`testbed.workloads.payloads.items_per_incident`).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from testbed.config import EmissionMode
from testbed.rng import DrawBuffer, stream
from testbed.topology import Topology


def _gaps(rng: np.random.Generator, p: float) -> Callable[[int], np.ndarray]:
    return lambda n: rng.geometric(p, n) - 1


class IncidentProcess:
    """Which processed inputs of each incident-mode operator open an incident."""

    def __init__(self, operators: Sequence[str], items_per_incident: Mapping[str, float], seed: int):
        self.operators = list(operators)
        self.items_per_incident = {o: float(items_per_incident[o]) for o in operators if o in items_per_incident}
        self.draws: List[Optional[DrawBuffer]] = [
            DrawBuffer(_gaps(stream(seed, f"incident/{o}"), 1.0 / self.items_per_incident[o]))
            if o in self.items_per_incident else None for o in operators]
        # per operator: inputs to skip before the next one that opens an incident
        self.gap: List[int] = [int(d.next()) if d is not None else 0 for d in self.draws]

    @classmethod
    def of(cls, topology: Topology, seed: int) -> "IncidentProcess":
        items: Dict[str, float] = {o: c.emission.items_per_incident for o, c in topology.configs.items()
                                   if c.emission.sim == EmissionMode.incident}
        return cls(topology.operators, items, seed)

    def on(self, op: int) -> bool:
        return self.draws[op] is not None

    @property
    def any(self) -> bool:
        return bool(self.items_per_incident)

    def take(self, op: int, count: int) -> int:
        """How many of operator op's next `count` processed inputs open an incident."""
        draws = self.draws[op]
        if draws is None:
            raise ValueError(f"{self.operators[op]} is not in incident mode")
        j, opened = self.gap[op], 0
        while j < count:
            opened += 1
            j += 1 + int(draws.next())
        self.gap[op] = j - count
        return opened
