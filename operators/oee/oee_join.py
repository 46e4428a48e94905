"""O7 "calculate OEE": joins the availability, performance and quality of one production record
(one reporting cycle of one machine; join key ``record_id``, the originating production item's
id) and emits OEE = A × P × Q once per record.

One Lua script per input stores the part (first value wins, so a redelivered part changes
nothing) and, when all three are present, names the part that completed the join. Only an input
of that part emits, so with racing instances exactly one of the three inputs yields the ``oee``
item, and a redelivery of it yields the same item again (id ``<record_id>/<op>``), a redelivery of
the others nothing. A record whose parts never all arrive (one dead-lettered) expires with the TTL.

Key: hash ``<prefix>:<op>:join:<record_id>`` (TTL ``join_ttl_s`` from the first part): fields
``availability``, ``performance``, ``quality`` (repr of the float), ``machine_id``,
``timestamp_ms``, ``completed_by`` (the part whose arrival completed the join).

Input: ``availability`` / ``performance`` / ``quality`` (``PartValue``). Output: at most one
``oee`` item (``OeeValue``). Params: ``join_ttl_s`` (3600).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.oee.params import parse_params
from operators.oee.records import AVAILABILITY, OEE, PERFORMANCE, QUALITY, OeeValue, PartValue
from operators.oee.redis_values import DEDUP_TTL_S, text

# KEYS[1] join hash; ARGV[1] part, ARGV[2] value, ARGV[3] machine id, ARGV[4] timestamp ms, ARGV[5] ttl.
# Returns the hash's fields (flat list) if this part completed the join, else an empty list.
_JOIN = """
local created = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSETNX', KEYS[1], 'machine_id', ARGV[3])
redis.call('HSETNX', KEYS[1], 'timestamp_ms', ARGV[4])
if created then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
local parts = redis.call('HMGET', KEYS[1], 'availability', 'performance', 'quality')
if not (parts[1] and parts[2] and parts[3]) then return {} end
redis.call('HSETNX', KEYS[1], 'completed_by', ARGV[1])
if redis.call('HGET', KEYS[1], 'completed_by') ~= ARGV[1] then return {} end
return redis.call('HGETALL', KEYS[1])
"""


@dataclass(frozen=True)
class OeeJoinParams:
    join_ttl_s: int = DEDUP_TTL_S


class OeeJoin:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(OeeJoinParams, ctx.params, ctx.operator)
        self._script = ctx.redis.register_script(_JOIN)

    def join_key(self, record_id: str) -> str:
        return f"{self.ctx.prefix}:{self.ctx.operator}:join:{record_id}"

    def process(self, item: Envelope) -> Sequence[Emission]:
        part = PartValue.from_payload(item.payload)
        if part.part != item.type:
            raise PoisonItem(f"{item.item_id}: item type {item.type!r} carries part {part.part!r}")
        reply = self._script(keys=[self.join_key(part.record_id)],
                             args=[part.part, repr(part.value), part.machine_id, part.timestamp_ms,
                                   self.params.join_ttl_s])
        if not reply:
            return []
        fields: Dict[str, str] = {text(k): text(v) for k, v in zip(reply[0::2], reply[1::2], strict=True)}
        a, p, q = (float(fields[name]) for name in (AVAILABILITY, PERFORMANCE, QUALITY))
        value = OeeValue(part.record_id, fields["machine_id"], a, p, q, a * p * q, int(fields["timestamp_ms"]))
        return [Emission(f"{part.record_id}/{self.ctx.operator}", OEE, value.to_payload(),
                         machine_id=value.machine_id)]

    def close(self) -> None:
        pass
