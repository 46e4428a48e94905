"""Cumulative integer counters per machine in Redis, applied once per input (O4, O5).

One Lua script adds an input's increments to the machine's hash and returns the totals *after*
this input; it stores those totals under the input's id (with a TTL), so a redelivered input gets
exactly the totals it got the first time and adds nothing. Racing instances are serialised by
Redis (a script runs atomically).

Keys (``<op>`` = the operator type):

* hash ``<prefix>:<op>:machine:<machine_id>``: one field per counter (cumulative);
* string ``<prefix>:<op>:seen:<item_id>`` (TTL ``dedup_ttl_s``): the totals after that input (JSON).
"""
from __future__ import annotations

import json
from typing import Any, Dict, Mapping

from operators.oee.redis_values import MachineScript, text

# KEYS[1] machine hash, KEYS[2] seen key; ARGV[1] ttl, ARGV[2..] field, increment, field, ...
_ADD_ONCE = """
local done = redis.call('GET', KEYS[2])
if done then return done end
local totals = {}
for i = 2, #ARGV, 2 do
  totals[ARGV[i]] = redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
local encoded = cjson.encode(totals)
redis.call('SET', KEYS[2], encoded, 'EX', ARGV[1])
return encoded
"""


class CumulativeCounters(MachineScript):
    def __init__(self, redis: Any, prefix: str, operator: str, dedup_ttl_s: int):
        super().__init__(redis, _ADD_ONCE, prefix, operator, dedup_ttl_s)

    def add_once(self, item_id: str, machine_id: str, increments: Mapping[str, int]) -> Dict[str, int]:
        """The machine's totals after adding ``increments`` for input ``item_id`` (added at most once)."""
        if not increments:
            raise ValueError("increments must name at least one counter")
        args: list = [self._ttl]
        for name, value in increments.items():
            args += [name, int(value)]
        reply = self._script(keys=[self.machine_key(machine_id), self.seen_key(item_id)], args=args)
        return {k: int(v) for k, v in json.loads(text(reply)).items()}
