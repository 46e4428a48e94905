"""Duration samples, processed/dead/emitted counters, busy time, CPU time and run-queue delay of
one instance, written to Redis in batches.

Keys and fields are those of ``operators/api.py``. Nothing is written per message: the runner
records into memory and a flusher thread writes everything every ``METRICS_FLUSH_S`` and on exit
in one pipeline (so Redis round trips do not cost throughput). A failed write keeps the data for
the next flush.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from operators.api import dead_hash, emitted_hash, metrics_stream, processed_hash
from operators.schedstat import CHILDREN, ChildDelays, thread_delay_ns

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


def thread_cpu_clock() -> int:
    """The CPU clock of the calling thread, readable from any thread of the process."""
    return time.pthread_getcpuclockid(threading.get_ident())


def children_cpu_s() -> float:
    """CPU seconds of the child processes reaped so far (an operator's tesseract runs)."""
    t = os.times()
    return t.children_user + t.children_system


class CpuTime:
    """CPU seconds the worker slots used: their threads' own CPU clocks plus the child processes
    they ran, read exactly at each ``take`` (a long item counts in each flush by its share).
    Unlike busy wall time it leaves out the wait for a CPU, so a crowded machine does not lengthen
    the service time it measures. Work the runner's other threads do for an item (the publisher's
    I/O, the completer's Redis writes) counts in neither."""

    def __init__(self, read_clock: Callable[[int], float] = time.clock_gettime,
                 children: Callable[[], float] = children_cpu_s):
        self.read_clock = read_clock
        self.children = children
        self._lock = threading.Lock()
        self._clocks: Dict[int, int] = {}  # slot -> CPU clock id of its thread
        self._seen: Dict[int, float] = {}  # slot -> its clock at the previous take
        self._done = 0.0  # seconds of threads that have ended, not yet taken
        self._children_seen = children()
        self.available = True  # False where a thread's CPU clock cannot be read: no CPU time is reported

    def register(self, slot: int, clock: Optional[int] = None) -> None:
        """Called by a worker thread when it starts (``clock``: its CPU clock, default the caller's)."""
        try:
            clock = thread_cpu_clock() if clock is None else clock
            start = self.read_clock(clock)
        except (AttributeError, OSError) as exc:  # a platform without per-thread CPU clocks
            log.warning("no CPU clock for worker slot %d (%r): CPU time not reported", slot, exc)
            self.available = False
            return
        with self._lock:
            self._clocks[slot] = clock
            self._seen[slot] = start

    def unregister(self, slot: int) -> None:
        """Called by a worker thread before it ends: its clock is gone afterwards."""
        with self._lock:
            clock = self._clocks.pop(slot, None)
            if clock is not None:
                self._done += self.read_clock(clock) - self._seen.pop(slot)

    def take(self) -> float:
        """CPU seconds (summed over slots and children) since the previous ``take``."""
        with self._lock:
            cpu, self._done = self._done, 0.0
            for slot, clock in self._clocks.items():
                now = self.read_clock(clock)
                cpu += now - self._seen[slot]
                self._seen[slot] = now
            children = self.children()
            cpu += children - self._children_seen
            self._children_seen = children
            return max(0.0, cpu)


class RunDelay:
    """Seconds the worker slots waited for a CPU inside their busy periods (operators/schedstat.py):
    a slot's thread's run-queue delay read when its busy period starts and ends (and at each ``take``
    for one in progress, so a long item counts in each flush by its share), plus the delay of the
    child processes the slots ran. Busy time less this delay is the service time of a machine with a
    CPU to spare; a delay outside busy periods (a woken worker waiting for a CPU to take its next
    batch) is left out, as busy time leaves out that wait."""

    def __init__(self, read: Callable[[int], Optional[int]] = thread_delay_ns, children: ChildDelays = CHILDREN):
        self.read = read
        self.children = children
        self._lock = threading.Lock()
        self._tids: Dict[int, int] = {}  # slot -> native id of its thread
        self._since: Dict[int, int] = {}  # busy slot -> its delay (ns) at the last start or take
        self._done = 0  # ns of finished busy periods not yet taken
        self._children_seen = children.total_ns()
        self.available = True  # False once a reading failed: no delay is reported

    def register(self, slot: int, tid: Optional[int] = None) -> None:
        """Called by a worker thread when it starts (``tid``: its native id, default the caller's)."""
        tid = threading.get_native_id() if tid is None else tid
        if self.read(tid) is None:
            log.warning("no run-queue delay readable for worker slot %d: not reported", slot)
            self.available = False
        with self._lock:
            self._tids[slot] = tid

    def unregister(self, slot: int) -> None:
        with self._lock:
            self._tids.pop(slot, None)

    def start(self, slot: int) -> None:
        with self._lock:
            now = self._read(slot)
            if now is not None:
                self._since[slot] = now

    def stop(self, slot: int) -> None:
        with self._lock:
            now, since = self._read(slot), self._since.pop(slot, None)
            if now is not None and since is not None:
                self._done += now - since

    def take(self) -> Optional[float]:
        """Delay seconds in busy periods since the previous ``take`` (None: not readable)."""
        with self._lock:
            delay, self._done = self._done, 0
            for slot, since in list(self._since.items()):
                now = self._read(slot)
                if now is not None:
                    delay += now - since
                    self._since[slot] = now
            children = self.children.total_ns()
            if children is None or self._children_seen is None:
                self.available = False
            else:
                delay += children - self._children_seen
                self._children_seen = children
            return max(0, delay) / 1e9 if self.available else None

    def _read(self, slot: int) -> Optional[int]:
        tid = self._tids.get(slot)
        value = None if tid is None else self.read(tid)
        if value is None:
            self.available = False
        return value


# the container's own cgroup CPU counter: v2 (private cgroup namespace), then v1's cpuacct
CGROUP_CPU_FILES = (("/sys/fs/cgroup/cpu.stat", 1e-6), ("/sys/fs/cgroup/cpuacct/cpuacct.usage", 1e-9),
                    ("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", 1e-9))


def cgroup_cpu_s(files: Sequence[tuple] = CGROUP_CPU_FILES) -> Optional[float]:
    """CPU seconds the whole container used so far (every thread and process in it), None where no
    cgroup counter is readable (outside a container, another layout)."""
    for path, unit in files:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            usage = next((line.split()[1] for line in text.splitlines() if line.startswith("usage_usec ")), None)
        else:
            usage = text.strip()
        if usage is not None and usage.isdigit():
            return int(usage) * unit
    return None


class ContainerCpu:
    """The container's CPU seconds between takes (None: no counter readable): what the machine spent
    on the instance, overhead threads and idle polling included, for the run's share of the machine."""

    def __init__(self, read: Callable[[], Optional[float]] = cgroup_cpu_s):
        self.read = read
        self._seen = read()

    def take(self) -> Optional[float]:
        now = self.read()
        if now is None or self._seen is None:
            self._seen = now
            return None
        delta, self._seen = max(0.0, now - self._seen), now
        return delta


def _plus(total: Optional[float], seconds: float) -> float:
    return (total or 0.0) + seconds


@dataclass
class _Buffer:
    samples: List[tuple] = field(default_factory=list)  # (t_ms, duration_ms, latency_ms or None)
    processed: int = 0
    dead: int = 0
    emitted: int = 0
    timed_out: int = 0  # inputs dropped unprocessed: older than ITEM_TIMEOUT_S when taken
    busy_s: float = 0.0
    cpu_s: float = 0.0
    delay_s: float = 0.0  # run-queue delay in busy periods
    container_cpu_s: Optional[float] = None  # None: the container's counter is not readable
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
        self.cpu = CpuTime()  # the worker threads register here
        self.delay = RunDelay()  # ... and here, and report their busy periods here as to ``busy``
        self.container = ContainerCpu()

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
        buf.cpu_s += self.cpu.take()
        cpu_ms = round(buf.cpu_s * 1000)
        buf.delay_s += self.delay.take() or 0.0
        delay_ms = round(buf.delay_s * 1000)
        container = self.container.take()
        if container is not None:
            buf.container_cpu_s = _plus(buf.container_cpu_s, container)
        container_ms = None if buf.container_cpu_s is None else round(buf.container_cpu_s * 1000)
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
            if self.cpu.available:
                count["cpu_ms"] = cpu_ms
            if self.delay.available:
                count["run_delay_ms"] = delay_ms
            if container_ms is not None:
                count["container_cpu_ms"] = container_ms
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
            self._buf.cpu_s += buf.cpu_s - cpu_ms / 1000.0
            self._buf.delay_s += buf.delay_s - delay_ms / 1000.0
            if container_ms is not None and buf.container_cpu_s is not None:
                rest = buf.container_cpu_s - container_ms / 1000.0
                self._buf.container_cpu_s = _plus(self._buf.container_cpu_s, rest)
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
            self._buf.cpu_s += buf.cpu_s
            self._buf.delay_s += buf.delay_s
            if buf.container_cpu_s is not None:
                self._buf.container_cpu_s = _plus(self._buf.container_cpu_s, buf.container_cpu_s)
            self._buf.unwritten_processed += buf.unwritten_processed
            self._buf.unwritten_emitted += buf.unwritten_emitted
