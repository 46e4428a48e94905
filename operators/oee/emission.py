"""What the filtering operators O2 and O6 pass on: one warning per *new* incident (their own rule,
the default) or, to compare with the simulator on equal terms, every ``every_n``-th input
(``emission`` = ``ratio``; the live runtime sets ``every_n`` to the operator's ``ratio_in``, 50 for
O2 and 100 for O6). The experiment's setting is ``topology.operators.<op>.emission.live``
(docs/architecture.md#emission).

Ratio mode counts the inputs of the operator *type*, across all its instances, with one Lua script
per input (as the simulator counts an operator type's items): the input that makes the count a
multiple of ``every_n`` emits, and its number is remembered by its id (TTL ``dedup_ttl_s``), so its
redelivery emits the same item again. Other inputs are not remembered (O2 and O6 see up to 250
readings per second): the runner already skips a redelivered input it finished, so only an input
whose first attempt died before it finished can be counted twice, which shifts the count by one.

Keys: counter ``<prefix>:<op>:nth`` (inputs counted), string ``<prefix>:<op>:seen:<item_id>`` (an
emitting input's number).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from operators.oee.redis_values import MachineScript, text

INCIDENT, RATIO = "incident", "ratio"
EMISSIONS: Tuple[str, ...] = (INCIDENT, RATIO)
# the registry names of the implementations with an incident rule (the others always pass a fixed ratio)
INCIDENT_OPERATORS = frozenset({"O2", "O6"})

# KEYS[1] seen key, KEYS[2] counter; ARGV[1] every_n, ARGV[2] ttl. Returns the input's number if
# it is an every_n-th one (it emits), else 0.
_COUNT = """
local done = redis.call('GET', KEYS[1])
if done then return tonumber(done) end
local k = redis.call('INCR', KEYS[2])
if k % tonumber(ARGV[1]) == 0 then
  redis.call('SET', KEYS[1], k, 'EX', ARGV[2])
  return k
end
return 0
"""


def check_emission(emission: str, every_n: int) -> Optional[Tuple[str, str]]:
    """The params' check (``OperatorParamError`` names the key): a known mode, every_n >= 1."""
    if emission not in EMISSIONS:
        return "emission", f"must be one of {', '.join(EMISSIONS)}, got {emission!r}"
    if every_n < 1:
        return "every_n", f"must be >= 1, got {every_n}"
    return None


class EveryNth(MachineScript):
    """The shared input counter of an operator type in ratio mode."""

    def __init__(self, redis: Any, prefix: str, operator: str, every_n: int, dedup_ttl_s: int):
        super().__init__(redis, _COUNT, prefix, operator, dedup_ttl_s)
        self.every_n = int(every_n)

    def counter_key(self) -> str:
        return f"{self._base}:nth"

    def count(self, item_id: str) -> int:
        """0, or the input's number (every_n, 2 x every_n, ...) when it is one that emits."""
        k = self._script(keys=[self.seen_key(item_id), self.counter_key()], args=[self.every_n, self._ttl])
        return int(text(k))
