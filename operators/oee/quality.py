"""O5 "calculate quality": (produced − defective) / produced, cumulative per machine
(docs/papers/btu-provisioning.md#operators).

The counters ``produced`` and ``defective`` (units) are kept in Redis and applied once per input
(``operators.oee.cumulative_counters``: hash ``<prefix>:<op>:machine:<machine_id>``,
``<prefix>:<op>:seen:<item_id>``). Before a machine has produced anything its quality is 1.0 (no
defect seen); the OEE of such a cycle is 0 anyway, as its performance is 0.

Input: ``production_record`` (O1). Output: one ``quality`` item (``PartValue``), id
``<input id>/<op>``.

Params: ``dedup_ttl_s`` (3600).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.cumulative_counters import CumulativeCounters
from operators.oee.params import parse_params
from operators.oee.records import QUALITY, PartValue, ProductionRecord
from operators.oee.redis_values import DEDUP_TTL_S


@dataclass(frozen=True)
class QualityParams:
    dedup_ttl_s: int = DEDUP_TTL_S


def quality(totals: Mapping[str, int]) -> float:
    produced = totals["produced"]
    return 1.0 if produced == 0 else (produced - totals["defective"]) / produced


class QualityCalculator:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(QualityParams, ctx.params, ctx.operator)
        self.counters = CumulativeCounters(ctx.redis, ctx.prefix, ctx.operator, self.params.dedup_ttl_s)

    def process(self, item: Envelope) -> Sequence[Emission]:
        record = ProductionRecord.from_payload(item.payload)
        if record.defective_units > record.produced_units:
            raise PoisonItem(f"{item.item_id}: {record.defective_units} defective of {record.produced_units} produced")
        totals = self.counters.add_once(item.item_id, record.machine_id,
                                        {"produced": record.produced_units, "defective": record.defective_units})
        part = PartValue(record.record_id, record.machine_id, QUALITY, quality(totals), record.timestamp_ms)
        return [Emission(f"{item.item_id}/{self.ctx.operator}", QUALITY, part.to_payload())]

    def close(self) -> None:
        pass
