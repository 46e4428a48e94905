"""Names and item encoding of the live job mode (docs/papers/daedalus.md#live-runtime), shared by the
keyed worker (operators/keyed_worker.py, in its container) and the runtime (testbed/live/job.py).

Broker: items enter the queue ``<prefix>.job.entry`` (the source backlog); the runtime's router
forwards them to the consistent-hash exchange ``<prefix>.job.keys`` (routing key = the item's key),
which spreads keys over the bound worker queues ``<prefix>.job.w<i>``. Rejected (malformed) items go
to ``<prefix>.job.dead``.

Redis (all under ``<prefix>:job:``): ``control`` (``run:<epoch>``, ``stop:<epoch>``, ``final:<epoch>``),
hash ``phase`` (worker -> its answer, e.g. ``stopped:3``), hash ``processed`` (worker -> items
processed, replays included), hash ``committed`` (worker -> items whose processing a checkpoint
committed), hash ``state`` (key -> committed count: the job's keyed state), list ``latency``
(``<done ms>,<latency ms>`` of every N-th item, committed with its checkpoint), hash ``lastcommit``
(worker -> the comma-separated ids its last checkpoint committed).
"""
from __future__ import annotations

from dataclasses import dataclass


def entry_queue(prefix: str) -> str:
    return f"{prefix}.job.entry"


def key_exchange(prefix: str) -> str:
    return f"{prefix}.job.keys"


def worker_queue(prefix: str, worker: int) -> str:
    return f"{prefix}.job.w{worker}"


def dead_queue(prefix: str) -> str:
    return f"{prefix}.job.dead"


def redis_key(prefix: str, name: str) -> str:
    return f"{prefix}:job:{name}"


def worker_name(worker: int) -> str:
    """The worker's name in the event log (instance_stats), live and simulated (testbed/job/tables.py)."""
    return f"w{worker}"


class ItemError(ValueError):
    """A body that is not an item of the job."""


@dataclass(frozen=True)
class Item:
    id: int  # 0, 1, 2, ... in order of arrival at the source
    key: str
    arrived_ms: int  # wall clock (ms since the epoch) of its arrival in the entry queue

    def encode(self) -> bytes:
        return f"{self.id},{self.key},{self.arrived_ms}".encode("ascii")

    @staticmethod
    def decode(body: bytes) -> "Item":
        try:
            i, key, t = body.decode("ascii").split(",")
            return Item(int(i), key, int(t))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ItemError(f"not a job item: {body[:40]!r}") from exc
