"""Pool activation of an instance: the live runtime's on/off flag and the instance's report of its
state, in Redis (keys and protocol: ``operators/api.py``). The runner polls ``wanted`` while active
and ``claim_active`` while inactive; ``RedisActivation`` is the real store, tests pass their own."""
from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from operators.api import ACTIVE, INACTIVE_FLAG, InstanceReport, activation_key, activation_wanted, instance_state_hash

# Report "active" only while the flag is not "0", in one step: a switch-off that comes while the
# instance is switching on is never answered by a stale "inactive" (api.py).
_CLAIM_ACTIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


class ActivationStore(Protocol):
    def wanted(self) -> bool:
        """The flag: False when it is ``0``."""

    def claim_active(self) -> bool:
        """Report ``active`` unless the flag is ``0``; whether it did."""

    def report(self, state: str) -> None:
        """Report ``inactive`` or ``stopped``."""


class RedisActivation:
    def __init__(self, redis: Any, prefix: str, instance: str, clock: Callable[[], float] = time.time):
        self.redis = redis
        self.instance = instance
        self.clock = clock
        self._flag = activation_key(prefix, instance)
        self._states = instance_state_hash(prefix)
        self._claim = redis.register_script(_CLAIM_ACTIVE)

    def wanted(self) -> bool:
        return activation_wanted(self.redis.get(self._flag))

    def claim_active(self) -> bool:
        return bool(self._claim(keys=[self._flag, self._states],
                                args=[INACTIVE_FLAG, self.instance, self._report(ACTIVE)]))

    def report(self, state: str) -> None:
        self.redis.hset(self._states, self.instance, self._report(state))

    def _report(self, state: str) -> str:
        return InstanceReport(state, int(self.clock() * 1000)).encode()
