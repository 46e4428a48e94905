"""O2 "filter availability": one warning per *new* defect incident of a machine, the rest dropped.

Input: ``availability`` items of S1 (payload ``status`` ∈ available | planned downtime | defect,
``timestamp_ms``). A reading whose status is ``defect`` while the machine's newest applied reading
was not (or the first reading seen of a machine) opens an incident and yields one ``warning``
(id ``<input id>/<op>``); everything else yields nothing. State and its Redis keys:
``operators.oee.incident_tracker`` (``<prefix>:<op>:machine:<id>``, ``<prefix>:<op>:seen:<item>``).

With ``emission`` = ``ratio`` it instead passes every ``every_n``-th reading of all (counted across
the operator's instances, ``operators.oee.emission``) as a ``warning`` (``incident`` = the reading's
number), whatever its status: the fixed 1 in 50 of the simulator's default, for comparisons on equal
terms.

Params: ``emission`` (``incident`` | ``ratio``, default ``incident``), ``every_n`` (50, the topology's
``ratio_in``), ``dedup_ttl_s`` (3600): how long processed input ids are remembered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.emission import INCIDENT, EveryNth, check_emission
from operators.oee.incident_tracker import IncidentTracker
from operators.oee.params import parse_params
from operators.oee.records import DEFECT, STATUSES, WARNING, IncidentWarning
from operators.oee.redis_values import DEDUP_TTL_S


@dataclass(frozen=True)
class AvailabilityFilterParams:
    emission: str = INCIDENT
    every_n: int = 50
    dedup_ttl_s: int = DEDUP_TTL_S

    def check(self) -> Optional[Tuple[str, str]]:
        return check_emission(self.emission, self.every_n)


def reading_time_ms(item: Envelope) -> int:
    """The reading's own timestamp, else the envelope's origin (the same value from the provider)."""
    ts = item.payload.get("timestamp_ms", item.origin_ms)
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise PoisonItem(f"{item.item_id}: timestamp_ms must be an integer, got {ts!r}")
    return ts


class AvailabilityFilter:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(AvailabilityFilterParams, ctx.params, ctx.operator)
        p = self.params
        self.tracker = IncidentTracker(ctx.redis, ctx.prefix, ctx.operator, p.dedup_ttl_s)
        self.nth = None if p.emission == INCIDENT else EveryNth(ctx.redis, ctx.prefix, ctx.operator, p.every_n,
                                                                p.dedup_ttl_s)

    def process(self, item: Envelope) -> Sequence[Emission]:
        status = item.payload.get("status")
        if status not in STATUSES:
            raise PoisonItem(f"{item.item_id}: status must be one of {', '.join(STATUSES)}, got {status!r}")
        ts = reading_time_ms(item)
        out: List[Emission] = []
        if self.nth is not None:
            k = self.nth.count(item.item_id)
            if k:
                warning = IncidentWarning(
                    kind=DEFECT, machine_id=item.machine_id, incident=k, since_ms=ts,
                    message=f"{item.machine_id}: {status} (reading {k}, one in {self.nth.every_n})")
                out.append(Emission(f"{item.item_id}/{self.ctx.operator}", WARNING, warning.to_payload()))
            return out
        incident = self.tracker.apply(item.item_id, item.machine_id, status == DEFECT, ts)
        if incident:
            warning = IncidentWarning(kind=DEFECT, machine_id=item.machine_id, incident=incident, since_ms=ts,
                                      message=f"{item.machine_id}: defect (incident {incident})")
            out.append(Emission(f"{item.item_id}/{self.ctx.operator}", WARNING, warning.to_payload()))
        return out

    def close(self) -> None:
        pass
