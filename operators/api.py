"""The contract between the shared runner (``operators/runner.py``) and the operator
implementations O1-O9, and the Redis keys through which instances report to the live runtime.

An operator is constructed once per instance from an ``OperatorContext`` and then called with one
decoded input item at a time (possibly from several threads at once when an instance processes
items in parallel: implementations keep no unsynchronised per-instance state; shared state lives
in Redis and is updated atomically). It returns what to publish; the runner stamps ``sent_ms``,
publishes to the operator type's own exchange/topic with confirms, and acknowledges the input only
after every emission is confirmed. Delivery is therefore at least once: a redelivered input must
produce the *same* emissions (deterministic ``item_id``s derived from the input's id) and must not
apply its state change twice.

Redis keys of a run (``<prefix>`` = the run's broker prefix), written by the runner:

* stream ``<prefix>:metrics``: one entry per sampled item and one per counter flush, fields
  ``operator``, ``instance``, ``kind`` (``sample`` | ``count``), ``t_ms`` (epoch ms), and
  ``duration_ms`` (``sample``) or ``processed`` / ``dead`` (``count``: items since the previous
  ``count`` entry of that instance);
* hash ``<prefix>:processed``: field ``<operator>`` -> items processed (all instances, cumulative;
  written in one transaction with the finished inputs' ids, so a crash can neither lose nor double
  a count);
* hash ``<prefix>:emitted``: field ``<operator>`` -> emissions confirmed by the broker (cumulative,
  written with the processed count);
* hash ``<prefix>:dead``: field ``<operator>`` -> items dead-lettered (cumulative);
* operator state under ``<prefix>:<operator>:...`` (each implementation documents its keys).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from operators.envelope import Envelope


def metrics_stream(prefix: str) -> str:
    return f"{prefix}:metrics"


def processed_hash(prefix: str) -> str:
    return f"{prefix}:processed"


def emitted_hash(prefix: str) -> str:
    return f"{prefix}:emitted"


def dead_hash(prefix: str) -> str:
    return f"{prefix}:dead"


class PoisonItem(Exception):
    """An input that can never be processed (unreadable image, missing field): the runner
    dead-letters it and counts it, and goes on."""


@dataclass(frozen=True)
class Emission:
    """One item to publish downstream. ``machine_id`` and ``origin_ms`` default to the input's."""

    item_id: str  # deterministic: the same input gives the same id (redelivery, racing instances)
    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    machine_id: Optional[str] = None
    origin_ms: Optional[int] = None

    def envelope(self, source: Envelope, sent_ms: int) -> Envelope:
        return Envelope(
            item_id=self.item_id, machine_id=self.machine_id or source.machine_id, type=self.type,
            origin_ms=source.origin_ms if self.origin_ms is None else self.origin_ms, sent_ms=sent_ms,
            payload=self.payload,
        )


@dataclass(frozen=True)
class OperatorContext:
    operator: str  # the operator type, e.g. "O3"
    instance: str  # this instance's id (container name in the live testbed)
    prefix: str  # the run's prefix: Redis keys start with "<prefix>:"
    redis: Any  # a redis.Redis client (thread-safe connection pool)
    params: Mapping[str, Any] = field(default_factory=dict)  # operator-specific settings
    clock: Callable[[], float] = __import__("time").time  # epoch seconds (injected in tests)


class Operator(Protocol):
    def process(self, item: Envelope) -> Sequence[Emission]:
        """Handle one input; raise ``PoisonItem`` for an input that can never be processed."""

    def close(self) -> None:
        """Release resources (called once when the instance stops)."""
