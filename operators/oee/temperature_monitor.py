"""O6 "monitor temperature": one warning per *new* threshold violation of a machine.

Input: ``temperature`` items of S3 (payload ``temperature_c``, ``timestamp_ms``). A reading above
``threshold_c`` while the machine's newest applied reading was not (or the first reading seen of a
machine) opens a violation and yields one ``warning`` (id ``<input id>/<op>``, ``value`` = the
temperature); a reading at or below the threshold closes it. No hysteresis: the provider's
excursions jump ~22 °C past the threshold, its noise around the mean stays ~15 °C below it.
State and its Redis keys: ``operators.oee.incident_tracker``.

With ``emission`` = ``ratio`` it instead passes every ``every_n``-th reading of all (counted across
the operator's instances, ``operators.oee.emission``) as a ``warning`` (``incident`` = the reading's
number), whatever its value: the fixed 1 in 100 of the simulator's default, for comparisons on equal
terms.

Params: ``threshold_c`` (85.0, the provider's ``TemperatureModel.threshold_c``), ``emission``
(``incident`` | ``ratio``, default ``incident``), ``every_n`` (100, the topology's ``ratio_in``),
``dedup_ttl_s`` (3600).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.availability_filter import reading_time_ms
from operators.oee.emission import INCIDENT, EveryNth, check_emission
from operators.oee.incident_tracker import IncidentTracker
from operators.oee.params import parse_params
from operators.oee.records import WARNING, IncidentWarning
from operators.oee.redis_values import DEDUP_TTL_S

TEMPERATURE = "temperature"


@dataclass(frozen=True)
class TemperatureMonitorParams:
    threshold_c: float = 85.0
    emission: str = INCIDENT
    every_n: int = 100
    dedup_ttl_s: int = DEDUP_TTL_S

    def check(self) -> Optional[Tuple[str, str]]:
        if not math.isfinite(self.threshold_c):
            return "threshold_c", "must be finite"
        return check_emission(self.emission, self.every_n)


class TemperatureMonitor:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(TemperatureMonitorParams, ctx.params, ctx.operator)
        p = self.params
        self.tracker = IncidentTracker(ctx.redis, ctx.prefix, ctx.operator, p.dedup_ttl_s)
        self.nth = None if p.emission == INCIDENT else EveryNth(ctx.redis, ctx.prefix, ctx.operator, p.every_n,
                                                                p.dedup_ttl_s)

    def process(self, item: Envelope) -> Sequence[Emission]:
        value = item.payload.get("temperature_c")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise PoisonItem(f"{item.item_id}: temperature_c must be a finite number, got {value!r}")
        ts = reading_time_ms(item)
        threshold = self.params.threshold_c
        out: List[Emission] = []
        if self.nth is not None:
            k = self.nth.count(item.item_id)
            if k:
                warning = IncidentWarning(
                    kind=TEMPERATURE, machine_id=item.machine_id, incident=k, since_ms=ts, value=float(value),
                    message=f"{item.machine_id}: temperature {value:.1f} °C (reading {k}, one in {self.nth.every_n})")
                out.append(Emission(f"{item.item_id}/{self.ctx.operator}", WARNING, warning.to_payload()))
            return out
        incident = self.tracker.apply(item.item_id, item.machine_id, value > threshold, ts)
        if incident:
            warning = IncidentWarning(
                kind=TEMPERATURE, machine_id=item.machine_id, incident=incident, since_ms=ts, value=float(value),
                message=f"{item.machine_id}: temperature {value:.1f} °C above {threshold:g} °C (incident {incident})")
            out.append(Emission(f"{item.item_id}/{self.ctx.operator}", WARNING, warning.to_payload()))
        return out

    def close(self) -> None:
        pass
