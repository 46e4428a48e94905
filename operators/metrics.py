"""Duration samples, processed/dead/emitted counters and busy time of one instance, written to
Redis in batches.

Keys and fields are those of ``operators/api.py``. Nothing is written per message: the runner
records into memory and a flusher thread writes everything every ``METRICS_FLUSH_S`` and on exit
in one pipeline (so Redis round trips do not cost throughput). A failed write keeps the data for
the next flush.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

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


class BusyTime:
    """Wall time worker slots are occupied, split exactly at each ``take``: an item that spans
    two flushes counts in each by its share (a 10 s item does not show as 10 s in one 1 s interval)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._since: Dict[int, float] = {}  # busy slot -> start of its busy period not yet taken
        self._done = 0.0  # seconds of finished busy periods not yet taken

    def start(self, slot: int) -> None:
        with self._lock:
            self._since[slot] = self.clock()

    def stop(self, slot: int) -> None:
        with self._lock:
            self._done += self.clock() - self._since.pop(slot)

    def busy_slots(self) -> int:
        with self._lock:
            return len(self._since)

    def take(self) -> float:
        """Busy seconds (summed over slots) since the previous ``take``."""
        with self._lock:
            now = self.clock()
            busy = self._done + sum(now - t for t in self._since.values())
            self._done = 0.0
            for slot in self._since:
                self._since[slot] = now
            return busy


@dataclass
class _Buffer:
    samples: List[tuple] = field(default_factory=list)  # (t_ms, duration_ms, latency_ms or None)
    processed: int = 0
    dead: int = 0
    emitted: int = 0
    timed_out: int = 0  # inputs dropped unprocessed: older than ITEM_TIMEOUT_S when taken
    busy_s: float = 0.0
    # cumulative counts whose transaction with the finished ids failed (Redis away): the next flush
    unwritten_processed: int = 0
    unwritten_emitted: int = 0


EVERY_NTH, PROBABILISTIC = "every_nth", "probabilistic"  # SAMPLING (testbed.config.Sampling)


class Metrics:
    """Thread-safe recorder; ``flush(redis)`` writes and clears what was recorded.

    Which completed items are sampled (``sampling``, the experiment's ``runtime.sampling``, the same
    rule as the simulator's): ``every_nth``, every ``sample_every``-th item of the instance, the first
    one included; ``probabilistic`` (VISP), each item independently with probability
    1/``sample_every``, from a generator seeded by the run prefix and the instance id."""

    def __init__(self, prefix: str, operator: str, instance: str, sample_every: int = 10,
                 measurement: str = "milliseconds", clock: Callable[[], float] = __import__("time").time,
                 sampling: str = EVERY_NTH):
        if sampling not in (EVERY_NTH, PROBABILISTIC):
            raise ValueError(f"unknown sampling {sampling!r}")
        self.prefix = prefix
        self.operator = operator
        self.instance = instance
        self.sample_every = sample_every
        self.sampling = sampling
        self._rng = random.Random(f"{prefix}/{instance}") if sampling == PROBABILISTIC else None
        self.measurement = measurement
        self.clock = clock
        self._lock = threading.Lock()
        self._buf = _Buffer()
        self._completions = 0  # items whose processing completed (the sampling counter)
        self.totals = _Buffer()  # cumulative, for logs and tests (samples and busy time not kept)
        self.busy = BusyTime()  # the runner's worker slots report here
        self.busy_total_s = 0.0  # cumulative busy seconds written so far

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def completed(self, sent_ms: int, amqp_timestamp_s: Optional[int], completed_ms: int,
                  origin_ms: Optional[int] = None) -> Optional[int]:
        """Record that an item's processing completed; returns its duration if it is sampled (by
        the ``sampling`` rule). A sampled item with an origin (when the source emitted what it
        derives from) also gets its end-to-end latency."""
        with self._lock:
            n = self._completions
            self._completions += 1
            if self._rng is not None:
                if self._rng.random() * self.sample_every >= 1.0:
                    return None
            elif n % self.sample_every:
                return None
            d = duration_ms(self.measurement, completed_ms, sent_ms, amqp_timestamp_s)
            self._buf.samples.append((completed_ms, d, None if origin_ms is None else completed_ms - origin_ms))
            return d

    def processed(self, n: int = 1, emitted: int = 0) -> None:
        """``n`` inputs finished with ``emitted`` emissions confirmed in all."""
        with self._lock:
            self._buf.processed += n
            self._buf.emitted += emitted
            self.totals.processed += n
            self.totals.emitted += emitted

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

    def timed_out(self, n: int = 1) -> None:
        with self._lock:
            self._buf.timed_out += n
            self.totals.timed_out += n

    def flush(self, redis: Any) -> bool:
        """Write the recorded samples, one ``count`` entry, the dead-letter hash and deferred
        cumulative counters; False (and the data kept for the next flush) when Redis fails."""
        with self._lock:
            buf, self._buf = self._buf, _Buffer()
        buf.busy_s += self.busy.take()
        busy_ms = round(buf.busy_s * 1000)  # whole ms; the rest goes with the next entry
        stream = metrics_stream(self.prefix)
        base = {"operator": self.operator, "instance": self.instance}
        try:
            pipe = redis.pipeline(transaction=False)
            for t_ms, d, latency in buf.samples:
                sample = {**base, "kind": "sample", "t_ms": t_ms, "duration_ms": d}
                if latency is not None:
                    sample["latency_ms"] = latency
                pipe.xadd(stream, sample)
            count = {**base, "kind": "count", "t_ms": self.now_ms(), "processed": buf.processed,
                     "dead": buf.dead, "emitted": buf.emitted, "busy_ms": busy_ms}
            if buf.timed_out:  # only where an item timeout dropped something (older readers ignore it)
                count["timeout"] = buf.timed_out
            pipe.xadd(stream, count)
            self.cumulative(pipe, buf.unwritten_processed, buf.unwritten_emitted)
            if buf.dead:
                pipe.hincrby(dead_hash(self.prefix), self.operator, buf.dead)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - Redis away: keep the data, retry at the next flush
            log.warning("metrics flush to Redis failed (kept for the next one): %r", exc)
            self._keep(buf)
            return False
        with self._lock:
            self._buf.busy_s += buf.busy_s - busy_ms / 1000.0
            self.busy_total_s += busy_ms / 1000.0
        return True

    def _keep(self, buf: _Buffer) -> None:
        """Put an unwritten buffer back in front of what was recorded since."""
        with self._lock:
            self._buf.samples[:0] = buf.samples
            self._buf.processed += buf.processed
            self._buf.dead += buf.dead
            self._buf.emitted += buf.emitted
            self._buf.timed_out += buf.timed_out
            self._buf.busy_s += buf.busy_s
            self._buf.unwritten_processed += buf.unwritten_processed
            self._buf.unwritten_emitted += buf.unwritten_emitted
