"""O4 "calculate availability": (total − scheduled downtime − unscheduled downtime) / total,
cumulative per machine (docs/papers/btu-provisioning.md#operators).

Per production record (one reporting cycle of ``reporting_cycle_s``, 60 s): total time += the
cycle; scheduled downtime += the cycle minus the planned production time (the provider plans 0 s
in planned downtime, the whole cycle otherwise); unscheduled downtime += the planned production
time if the status is ``defect``. The counters are integer seconds in Redis, applied once per
input (``operators.oee.cumulative_counters``: hash ``<prefix>:<op>:machine:<machine_id>`` with
fields ``total_s``, ``scheduled_s``, ``unscheduled_s``; ``<prefix>:<op>:seen:<item_id>``).

Input: ``production_record`` (O1). Output: one ``availability`` item (``PartValue``, the machine's
cumulative availability after this record), id ``<input id>/<op>``.

Params: ``reporting_cycle_s`` (60), ``dedup_ttl_s`` (3600).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext
from operators.envelope import Envelope
from operators.oee.cumulative_counters import CumulativeCounters
from operators.oee.params import parse_params
from operators.oee.records import AVAILABILITY, DEFECT, PartValue, ProductionRecord
from operators.oee.redis_values import DEDUP_TTL_S


@dataclass(frozen=True)
class AvailabilityParams:
    reporting_cycle_s: int = 60
    dedup_ttl_s: int = DEDUP_TTL_S

    def check(self) -> Optional[Tuple[str, str]]:
        return None if self.reporting_cycle_s > 0 else ("reporting_cycle_s", "must be > 0")


def downtime_increments(record: ProductionRecord, cycle_s: int) -> Dict[str, int]:
    planned = min(record.planned_production_time_s, cycle_s)
    return {"total_s": cycle_s, "scheduled_s": cycle_s - planned,
            "unscheduled_s": planned if record.status == DEFECT else 0}


def availability(totals: Mapping[str, int]) -> float:
    total = totals["total_s"]
    return (total - totals["scheduled_s"] - totals["unscheduled_s"]) / total


class AvailabilityCalculator:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(AvailabilityParams, ctx.params, ctx.operator)
        self.counters = CumulativeCounters(ctx.redis, ctx.prefix, ctx.operator, self.params.dedup_ttl_s)

    def process(self, item: Envelope) -> Sequence[Emission]:
        record = ProductionRecord.from_payload(item.payload)
        totals = self.counters.add_once(item.item_id, record.machine_id,
                                        downtime_increments(record, self.params.reporting_cycle_s))
        part = PartValue(record.record_id, record.machine_id, AVAILABILITY, availability(totals), record.timestamp_ms)
        return [Emission(f"{item.item_id}/{self.ctx.operator}", AVAILABILITY, part.to_payload())]

    def close(self) -> None:
        pass
