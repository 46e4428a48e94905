"""O3 "calculate performance": performance = produced × idealProductionTime / reportingCycle
(docs/papers/btu-provisioning.md#operators), per production record; stateless.

idealProductionTime is the ideal time per unit of the machine's type (``ideal_cycle_s``, by
machine type). The default, 1.2 s for every type, is the provider's production model
(``testbed.workloads.payloads.ProductionModel.ideal_cycle_s``: 50 units per 60 s cycle at full
performance), so the provider's machines score ~0.9. reportingCycle is the length of one
production record, one machine minute (``reporting_cycle_s`` = 60, the provider's
``reporting_cycle_s``); it is the cycle, not the planned production time, so a cycle in planned
downtime or defect (nothing produced) scores 0.

Input: ``production_record`` (O1). Output: one ``performance`` item (``PartValue``), id
``<input id>/<op>``.

Params: ``ideal_cycle_s`` (mapping machine type -> seconds per unit, default all three provider
types 1.2), ``default_ideal_cycle_s`` (1.2, for a type not in the mapping or unreadable),
``reporting_cycle_s`` (60).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext
from operators.envelope import Envelope
from operators.oee.params import parse_params
from operators.oee.records import PERFORMANCE, PartValue, ProductionRecord

PROVIDER_IDEAL_CYCLE_S = 1.2
PROVIDER_MACHINE_TYPES = ("injection moulding", "cnc milling", "assembly")  # testbed.workloads.payloads.MACHINE_TYPES


@dataclass(frozen=True)
class PerformanceParams:
    ideal_cycle_s: Mapping[str, float] = field(
        default_factory=lambda: {t: PROVIDER_IDEAL_CYCLE_S for t in PROVIDER_MACHINE_TYPES})
    default_ideal_cycle_s: float = PROVIDER_IDEAL_CYCLE_S
    reporting_cycle_s: float = 60.0

    def check(self) -> Optional[Tuple[str, str]]:
        if not self.reporting_cycle_s > 0:
            return "reporting_cycle_s", "must be > 0"
        if not self.default_ideal_cycle_s > 0:
            return "default_ideal_cycle_s", "must be > 0"
        for machine_type, seconds in self.ideal_cycle_s.items():
            if not seconds > 0:
                return f"ideal_cycle_s.{machine_type}", "must be > 0"
        return None

    def ideal_for(self, machine_type: str) -> float:
        return self.ideal_cycle_s.get(machine_type, self.default_ideal_cycle_s)


def performance(record: ProductionRecord, params: PerformanceParams) -> float:
    return record.produced_units * params.ideal_for(record.machine_type) / params.reporting_cycle_s


class PerformanceCalculator:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(PerformanceParams, ctx.params, ctx.operator)

    def process(self, item: Envelope) -> Sequence[Emission]:
        record = ProductionRecord.from_payload(item.payload)
        part = PartValue(record.record_id, record.machine_id, PERFORMANCE, performance(record, self.params),
                         record.timestamp_ms)
        return [Emission(f"{item.item_id}/{self.ctx.operator}", PERFORMANCE, part.to_payload())]

    def close(self) -> None:
        pass
