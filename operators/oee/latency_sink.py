"""O8 "inform user": the sink. In experiments it records each item's end-to-end latency and
discards the item (emits nothing).

Latency = now (the injected clock) − ``origin_ms`` (when the reading the item derives from was
taken). One Lua script per input appends an entry to a stream, at most once per input id (a
redelivered item is not counted twice):

* stream ``<prefix>:latency`` (capped near ``max_entries``): fields ``item`` (input id),
  ``machine``, ``type`` (``warning`` | ``report`` | ...), ``origin_ms``, ``t_ms`` (receive time,
  epoch ms), ``latency_ms``;
* string ``<prefix>:<op>:seen:<item_id>`` (TTL ``dedup_ttl_s``).

Params: ``max_entries`` (1000000), ``dedup_ttl_s`` (3600).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from operators.api import Emission, OperatorContext
from operators.envelope import Envelope
from operators.oee.params import parse_params
from operators.oee.redis_values import DEDUP_TTL_S


def latency_stream(prefix: str) -> str:
    return f"{prefix}:latency"


# KEYS[1] seen key, KEYS[2] stream; ARGV[1] ttl, ARGV[2] max entries, ARGV[3..] field, value, ...
# Returns 1 if recorded, 0 for a repeated input.
_RECORD_ONCE = """
if not redis.call('SET', KEYS[1], 1, 'NX', 'EX', ARGV[1]) then return 0 end
local entry = {}
for i = 3, #ARGV do entry[#entry + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(entry))
return 1
"""


@dataclass(frozen=True)
class LatencySinkParams:
    max_entries: int = 1_000_000
    dedup_ttl_s: int = DEDUP_TTL_S

    def check(self) -> Optional[Tuple[str, str]]:
        return None if self.max_entries > 0 else ("max_entries", "must be > 0")


class LatencySink:
    def __init__(self, ctx: OperatorContext):
        self.ctx = ctx
        self.params = parse_params(LatencySinkParams, ctx.params, ctx.operator)
        self._script = ctx.redis.register_script(_RECORD_ONCE)
        self.stream = latency_stream(ctx.prefix)

    def process(self, item: Envelope) -> Sequence[Emission]:
        now_ms = int(round(self.ctx.clock() * 1000))
        self._script(keys=[f"{self.ctx.prefix}:{self.ctx.operator}:seen:{item.item_id}", self.stream],
                     args=[self.params.dedup_ttl_s, self.params.max_entries,
                           "item", item.item_id, "machine", item.machine_id, "type", item.type,
                           "origin_ms", item.origin_ms, "t_ms", now_ms, "latency_ms", now_ms - item.origin_ms])
        return []

    def close(self) -> None:
        pass
