"""Duration samples and processed/dead counters of one instance, written to Redis in batches.

Keys and fields are those of ``operators/api.py``. Nothing is written per message: the runner
records into memory and a flusher thread writes everything every ``METRICS_FLUSH_S`` and on exit
in one pipeline (so Redis round trips do not cost throughput). A failed write keeps the data for
the next flush.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

from operators.api import dead_hash, emitted_hash, metrics_stream, processed_hash

log = logging.getLogger(__name__)


def duration_ms(measurement: str, completed_ms: int, sent_ms: int, amqp_timestamp_s: Optional[int]) -> int:
    """An item's duration sample.

    ``milliseconds``: completion of processing minus the upstream send time (``sent_ms``).
    ``seconds_truncated`` (the visp2017 profile): minus the AMQP ``timestamp`` property, whole
    seconds, which adds a bias in [0, 1000) ms; without an AMQP timestamp (Kafka) the send time
    truncated to the second stands in for it.
    """
    if measurement == "milliseconds":
        return completed_ms - sent_ms
    if measurement == "seconds_truncated":
        seconds = amqp_timestamp_s if amqp_timestamp_s is not None else sent_ms // 1000
        return completed_ms - seconds * 1000
    raise ValueError(f"unknown measurement {measurement!r}")


@dataclass
class _Buffer:
    samples: List[tuple] = field(default_factory=list)  # (t_ms, duration_ms)
    processed: int = 0
    dead: int = 0
    # cumulative counts whose transaction with the finished ids failed (Redis away): the next flush
    unwritten_processed: int = 0
    unwritten_emitted: int = 0


class Metrics:
    """Thread-safe recorder; ``flush(redis)`` writes and clears what was recorded."""

    def __init__(self, prefix: str, operator: str, instance: str, sample_every: int = 10,
                 measurement: str = "milliseconds", clock: Callable[[], float] = __import__("time").time):
        self.prefix = prefix
        self.operator = operator
        self.instance = instance
        self.sample_every = sample_every
        self.measurement = measurement
        self.clock = clock
        self._lock = threading.Lock()
        self._buf = _Buffer()
        self._completions = 0  # items whose processing completed (the sampling counter)
        self.totals = _Buffer()  # cumulative, for logs and tests (samples not kept)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def completed(self, sent_ms: int, amqp_timestamp_s: Optional[int], completed_ms: int) -> Optional[int]:
        """Record that an item's processing completed; returns its duration if it is sampled
        (every ``sample_every``-th item, the first one included)."""
        with self._lock:
            n = self._completions
            self._completions += 1
            if n % self.sample_every:
                return None
            d = duration_ms(self.measurement, completed_ms, sent_ms, amqp_timestamp_s)
            self._buf.samples.append((completed_ms, d))
            return d

    def processed(self, n: int = 1) -> None:
        with self._lock:
            self._buf.processed += n
            self.totals.processed += n

    def cumulative(self, pipe: Any, processed: int, emitted: int) -> None:
        """Queue the cumulative counters on ``pipe``: the runner executes them in one transaction
        with the finished inputs' ids, so the hashes stay exact even when an instance is killed."""
        if processed:
            pipe.hincrby(processed_hash(self.prefix), self.operator, processed)
        if emitted:
            pipe.hincrby(emitted_hash(self.prefix), self.operator, emitted)

    def defer_cumulative(self, processed: int, emitted: int) -> None:
        """The transaction failed: the next flush writes the counters instead."""
        with self._lock:
            self._buf.unwritten_processed += processed
            self._buf.unwritten_emitted += emitted

    def dead(self, n: int = 1) -> None:
        with self._lock:
            self._buf.dead += n
            self.totals.dead += n

    def flush(self, redis: Any) -> bool:
        """Write the recorded samples, one ``count`` entry, the dead-letter hash and deferred
        cumulative counters; False (and
        the data kept for the next flush) when Redis fails."""
        with self._lock:
            buf, self._buf = self._buf, _Buffer()
        stream = metrics_stream(self.prefix)
        base = {"operator": self.operator, "instance": self.instance}
        try:
            pipe = redis.pipeline(transaction=False)
            for t_ms, d in buf.samples:
                pipe.xadd(stream, {**base, "kind": "sample", "t_ms": t_ms, "duration_ms": d})
            pipe.xadd(stream, {**base, "kind": "count", "t_ms": self.now_ms(),
                               "processed": buf.processed, "dead": buf.dead})
            self.cumulative(pipe, buf.unwritten_processed, buf.unwritten_emitted)
            if buf.dead:
                pipe.hincrby(dead_hash(self.prefix), self.operator, buf.dead)
            pipe.execute()
            return True
        except Exception as exc:  # noqa: BLE001 - Redis away: keep the data, retry at the next flush
            log.warning("metrics flush to Redis failed (kept for the next one): %r", exc)
            with self._lock:
                self._buf.samples[:0] = buf.samples
                self._buf.processed += buf.processed
                self._buf.dead += buf.dead
                self._buf.unwritten_processed += buf.unwritten_processed
                self._buf.unwritten_emitted += buf.unwritten_emitted
            return False
