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
  ``duration_ms`` (``sample``) or, for ``count``, since the previous ``count`` entry of that
  instance: ``processed`` / ``dead`` (items), ``emitted`` (emissions confirmed by the broker, counted
  when their input finishes) and ``busy_ms`` (wall time the instance's worker slots were occupied:
  decoding, duplicate check, ``WORK_MS``, the operator call and handing the emissions to the
  publisher, whose confirms come asynchronously while the slot takes the next item; summed over
  the ``PARALLEL`` slots, so utilisation = ``busy_ms`` / (interval x ``PARALLEL``)), ``cpu_ms``
  (CPU time of the worker threads and the processes they ran over the same work: busy time without
  the wait for a CPU), ``run_delay_ms`` (the time the same threads and processes waited for a CPU
  inside busy periods, ``operators/schedstat.py``: ``busy_ms`` less it is the service time of a
  machine with a CPU to spare; absent where the scheduler's statistics are unreadable) and
  ``container_cpu_ms`` (the container's whole cgroup CPU, overhead threads included; absent where no
  cgroup counter is readable). Entries of older writers lack ``emitted`` and ``busy_ms`` (read as 0)
  and the CPU and delay fields (read as unknown);
* per-edge counts: an operator publishes each emission once, to its own fanout exchange (Kafka: its
  own topic, read by one consumer group per downstream operator), so every downstream operator's
  edge receives exactly the operator's ``emitted`` items: the count of edge ``A -> B`` is ``A``'s
  ``emitted``, for each ``B`` in ``A``'s downstream list;
* hash ``<prefix>:processed``: field ``<operator>`` -> items processed (all instances, cumulative;
  written in one transaction with the finished inputs' ids, so a crash can neither lose nor double
  a count);
* hash ``<prefix>:emitted``: field ``<operator>`` -> emissions confirmed by the broker (cumulative,
  written with the processed count);
* hash ``<prefix>:dead``: field ``<operator>`` -> items dead-lettered (cumulative);
* hash ``<prefix>:timeout``: field ``<operator>`` -> inputs dropped unprocessed because their origin
  was older than ``ITEM_TIMEOUT_S`` when taken (cumulative; written with the input's finished id, in
  one Lua script, so a redelivery is neither processed nor counted again); ``count`` entries carry
  the interval's ``timeout`` too (absent in older writers' entries: 0);
* hash ``<prefix>:instance_state``: field ``<instance>`` -> JSON ``{"state": ..., "t_ms": ...}``
  (``InstanceReport``; ``t_ms``: the instance's epoch ms when it wrote the state), ``state`` one of
  ``active`` (consuming, may hold inputs), ``inactive`` (consumes nothing and holds nothing: every
  input it had is acknowledged or back in its queue, and the broker has applied those
  settlements) or ``stopped`` (exited after draining);
* operator state under ``<prefix>:<operator>:...`` (each implementation documents its keys).

Written by the live runtime, read by the runner:

* string ``<prefix>:active:<instance>`` (pool activation of a pre-started replica): ``0`` switches
  the instance off, ``1`` (or no key: the default) on. The runner polls it every
  ``ACTIVATION_POLL_S``. Switching off: it cancels its consumers (Kafka: stops fetching), hands
  back the inputs it holds but has not started (RabbitMQ: nack with requeue, so other replicas get
  them at once; Kafka: left uncommitted), finishes and acknowledges those in process, makes sure
  the broker has applied every settlement (RabbitMQ: a synchronous round trip on the channel;
  Kafka: commit, then leave the consumer group so its partitions go to the active members), and
  only then reports ``inactive``. Switching on: it claims ``active`` in one atomic step with
  reading the flag (a Lua script: no claim while the flag is ``0``) and only then consumes again,
  so an ``inactive`` report read after setting the flag to ``0`` is final. A switch-off always
  completes before a switch-on is taken up; an instance started with the flag at ``0`` consumes
  nothing and reports ``inactive`` at once; on Kafka consuming again waits for a group rebalance.
  With ``ACTIVATION_POLL_S=0`` the flag is not read and no state is reported.
"""
from __future__ import annotations

import json
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


def timeout_hash(prefix: str) -> str:
    return f"{prefix}:timeout"


def activation_key(prefix: str, instance: str) -> str:
    """The live runtime's on/off flag of one instance: ``1`` (or absent) active, ``0`` inactive."""
    return f"{prefix}:active:{instance}"


def instance_state_hash(prefix: str) -> str:
    return f"{prefix}:instance_state"


def seen_key(prefix: str, operator: str, producer: str, item_id: str) -> str:
    """Redis key remembering that ``operator`` finished input ``item_id`` from ``producer``."""
    return f"{prefix}:{operator}:finished:{producer}:{item_id}"


ACTIVE, INACTIVE, STOPPED = "active", "inactive", "stopped"
INACTIVE_FLAG = "0"  # any other value of the activation key (or none) means active


def activation_wanted(raw: Any) -> bool:
    """The activation key's value (``GET``: None, bytes or str) as on (True) or off."""
    return raw not in (INACTIVE_FLAG, INACTIVE_FLAG.encode())


@dataclass(frozen=True)
class InstanceReport:
    """An instance's own report of its activation state (hash ``instance_state_hash``)."""

    state: str  # ACTIVE | INACTIVE | STOPPED
    t_ms: int  # epoch ms of the report (the instance's clock)

    def encode(self) -> str:
        return json.dumps({"state": self.state, "t_ms": self.t_ms})

    @classmethod
    def decode(cls, raw: Any) -> Optional["InstanceReport"]:
        """None for a value that is not a report (bytes or str accepted)."""
        try:
            value = json.loads(raw)
            report = cls(str(value["state"]), int(value["t_ms"]))
        except (ValueError, TypeError, KeyError):
            return None
        return report if report.state in (ACTIVE, INACTIVE, STOPPED) else None


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
