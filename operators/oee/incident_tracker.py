"""Per-machine incident state in Redis, shared by O2 (defects) and O6 (temperature violations):
a warning is due once per *new* incident, i.e. on a reading that moves a machine from "no
incident" into "incident".

Readings of one machine arrive out of order (competing instances, redelivery), so the state keeps
the timestamp of the newest reading applied; an older reading changes nothing and warns nothing.
One Lua script per reading makes the check-and-update atomic across racing instances. A reading
that opened an incident is remembered by its id (with a TTL), so its redelivery yields the same
warning again and opens nothing. Other readings need no memory (and O2/O6 see 250 readings per
second at 8 machines): a redelivered one is either older than the newest applied reading (ignored)
or is that reading, whose status the machine already has, so it opens nothing either way.

Keys (``<op>`` = the operator type, e.g. ``O2``):

* hash ``<prefix>:<op>:machine:<machine_id>``: ``active`` (0/1), ``ts`` (ms of the newest applied
  reading), ``incidents`` (how many have been opened);
* string ``<prefix>:<op>:seen:<item_id>`` (TTL ``dedup_ttl_s``), only for a reading that opened an
  incident: the incident's number.
"""
from __future__ import annotations

from typing import Any

from operators.oee.redis_values import MachineScript, text

# KEYS[1] machine hash, KEYS[2] seen key; ARGV[1] 1 if the reading is in incident, ARGV[2] its ms,
# ARGV[3] ttl. Returns 0 or the opened incident's number.
_APPLY = """
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local state = redis.call('HMGET', KEYS[1], 'active', 'ts')
local active, ts = state[1], tonumber(state[2])
local now = tonumber(ARGV[2])
local opened = 0
if ts == nil or now >= ts then
  if ARGV[1] == '1' and active ~= '1' then
    opened = redis.call('HINCRBY', KEYS[1], 'incidents', 1)
  end
  redis.call('HSET', KEYS[1], 'active', ARGV[1], 'ts', ARGV[2])
end
if opened > 0 then redis.call('SET', KEYS[2], opened, 'EX', ARGV[3]) end
return opened
"""


class IncidentTracker(MachineScript):
    def __init__(self, redis: Any, prefix: str, operator: str, dedup_ttl_s: int):
        super().__init__(redis, _APPLY, prefix, operator, dedup_ttl_s)

    def apply(self, item_id: str, machine_id: str, in_incident: bool, timestamp_ms: int) -> int:
        """0, or the number (1, 2, ...) of the incident this reading opened (a warning is due)."""
        opened = self._script(keys=[self.machine_key(machine_id), self.seen_key(item_id)],
                              args=[1 if in_incident else 0, int(timestamp_ms), self._ttl])
        return int(text(opened))
