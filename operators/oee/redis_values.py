"""Small helpers for the operators' Redis state: conversion of a redis-py client's replies (whether or
not it decodes responses) and the key layout of the per-machine state scripts (O2, O4, O5, O6)."""
from __future__ import annotations

from typing import Any

DEDUP_TTL_S = 3600  # how long processed input ids are remembered: far beyond any redelivery delay


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


class MachineScript:
    """A Lua script over a machine's state hash ``<prefix>:<op>:machine:<machine_id>`` and an
    input's memory ``<prefix>:<op>:seen:<item_id>`` (kept ``dedup_ttl_s``)."""

    def __init__(self, redis: Any, script: str, prefix: str, operator: str, dedup_ttl_s: int):
        self._script = redis.register_script(script)
        self._base = f"{prefix}:{operator}"
        self._ttl = int(dedup_ttl_s)

    def machine_key(self, machine_id: str) -> str:
        return f"{self._base}:machine:{machine_id}"

    def seen_key(self, item_id: str) -> str:
        return f"{self._base}:seen:{item_id}"
