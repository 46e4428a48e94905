"""The live job's measurements, one row per second, taken on a thread of their own so that rows go
on while the control side blocks in a restart: arrivals (the source's count), each worker's
processed items (its count in Redis), its CPU (cgroup usage over the second / its quota) and the
lag (entry backlog + the worker queues' ready items). Redis away for a moment: the row is taken
when it is back (the seconds catch up); away for longer than `REDIS_OUTAGE_S`, restarted or
emptied: the run's fault. A lost broker connection is the run's fault at once."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from operators.keyed_job import redis_key, worker_name, worker_queue
from testbed.job.engine import Second
from testbed.live.job_cpu import cpu_fraction, find_usage_path, read_usage_ns
from testbed.live.job_faults import FaultWatch, redis_client
from testbed.live.job_flow import connect as amqp_connect
from testbed.live.job_routing import Outage
from testbed.live.job_workers import WorkerContainer
from testbed.messages import one_line

SAMPLE_S = 1.0
REDIS_OUTAGE_S = 10.0  # Redis unreachable for longer: the run ends (its counts and checkpoints are there)


@dataclass(frozen=True)
class JobState:
    """What the job runs as, for a row: its workers, how many are deployed, whether it is down (in
    a restart) and the run second it last came up."""

    workers: Dict[int, WorkerContainer]
    n: int
    down: bool
    up_since: float


@dataclass
class _LastReading:
    """The previous reading: when, processed per worker, CPU time per worker."""

    t: float
    processed: Dict[str, int] = field(default_factory=dict)
    usage: Dict[int, Tuple[str, int]] = field(default_factory=dict)  # worker -> (its container, CPU time)


class Sampler(threading.Thread):
    def __init__(self, amqp_url: str, redis_url: str, prefix: str, top: int, cpus: float, source: Any, router: Any,
                 plan: np.ndarray, state: Callable[[], JobState], faults: FaultWatch, t0: float) -> None:
        super().__init__(name="job-sampler", daemon=True)
        self.amqp_url, self.redis_url, self.prefix, self.top, self.cpus = amqp_url, redis_url, prefix, top, cpus
        self.source, self.router, self.plan, self.state, self.faults, self.t0 = source, router, plan, state, faults, t0
        self.rows: List[Second] = []
        self.stopping = threading.Event()

    def stop(self, timeout_s: float) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        import pika.exceptions

        try:
            self._sample()
        except pika.exceptions.AMQPError as exc:
            self.faults.fault = self.faults.reason(exc, "the measurements")
        except BaseException as exc:
            self.faults.sampler_error = exc

    def _sample(self) -> None:
        client = redis_client(self.redis_url)
        conn = amqp_connect(self.amqp_url)
        ch = conn.channel()
        last = _LastReading(time.monotonic())
        outage = Outage(REDIS_OUTAGE_S)
        k = 0
        while not self.stopping.is_set():
            due = self.t0 + (k + 1) * SAMPLE_S
            while time.monotonic() < due and not self.stopping.is_set():
                conn.process_data_events(time_limit=min(0.05, max(0.0, due - time.monotonic())))
            if self.stopping.is_set():
                break
            proc, stop = self._read_processed(client, outage)
            if stop:
                break
            if proc is None:
                continue
            self.rows.append(self._row(k, proc, last, ch))
            k += 1
        if conn.is_open:
            conn.close()
        client.close()

    def _read_processed(self, client: Any, outage: Outage) -> Tuple[Optional[Dict[str, int]], bool]:
        """(processed per worker or None to try again, whether the run has a fault and sampling stops)."""
        import redis

        try:
            proc = {key.decode(): int(v) for key, v in client.hgetall(redis_key(self.prefix, "processed")).items()}
            lost = self.faults.redis_lost(client)
        except redis.RedisError as exc:
            if outage.failed(self.faults.now()):
                self.faults.fault = (f"Redis unreachable since t={outage.since:.0f} s ({one_line(str(exc), 120)}): "
                                     f"the run's counts and checkpoints are there; the run cannot go on")
                return None, True
            time.sleep(0.2)
            return None, False
        outage.ok()
        if lost:
            self.faults.fault = lost
            return None, True
        return proc, False

    def _row(self, k: int, proc: Dict[str, int], last: _LastReading, ch: Any) -> Second:
        """Second k's row: throughput and CPU per worker, the backlog before and in the workers' queues."""
        now = time.monotonic()
        dt = now - last.t
        last.t = now
        st = self.state()
        thr, cpu = self._worker_rates(st.workers, proc, last, dt)
        waiting = 0
        for w in range(self.top):
            waiting += ch.queue_declare(worker_queue(self.prefix, w), passive=True).method.message_count
        forwarded = self.router.forwarded  # read first: forwarded <= emitted at any moment, so the backlog >= 0
        backlog = self.source.emitted - forwarded
        # what the source published in second k (its plan while it is still catching up)
        per_second = self.source.per_second
        arrivals = per_second[k] if k < len(per_second) else int(self.plan[k]) if k < len(self.plan) else 0
        return Second(arrivals=float(arrivals), thr=thr, cpu=cpu, lag=float(backlog + waiting),
                      uptime=0.0 if st.down else k + 1.0 - st.up_since, parallel=st.n, running=0 if st.down else st.n)

    def _worker_rates(self, workers: Dict[int, WorkerContainer], proc: Dict[str, int], last: _LastReading,
                      dt: float) -> Tuple[np.ndarray, np.ndarray]:
        thr = np.zeros(self.top)
        cpu = np.full(self.top, np.nan)
        for w, wc in workers.items():
            name = worker_name(w)
            thr[w] = max(0, proc.get(name, 0) - last.processed.get(name, 0))
            use = _usage(wc)
            prev = last.usage.get(w)
            if use is not None and prev is not None and prev[0] == wc.container.id:
                cpu[w] = min(1.5, cpu_fraction(prev[1], use, dt, self.cpus))
            if use is not None:
                last.usage[w] = (wc.container.id, use)
        for w in list(last.usage):
            if w not in workers:
                del last.usage[w]
        last.processed = proc
        return thr, cpu


def _usage(wc: WorkerContainer) -> Optional[int]:
    if wc.usage_path is None:
        wc.usage_path = find_usage_path(wc.container.id)
    if wc.usage_path is None:
        return None
    try:
        return read_usage_ns(Path(wc.usage_path))
    except (OSError, ValueError):
        return None  # the container is going away
