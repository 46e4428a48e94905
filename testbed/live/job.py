"""Job mode on the live testbed (docs/papers/daedalus.md#live-runtime): the Daedalus paper's keyed
job, scaled down to one machine, driven by the same controllers as the job simulator
(testbed/sim/job.py) and writing the same event-log tables.

* **Workers** are containers of the image `backend.live.job.image` (operators/keyed_worker.py), one
  per worker, each with a CPU quota (`cpus`); each burns CPU per item and keeps per-key counts,
  committed with its checkpoint.
* **Keys:** items enter the entry queue (the source backlog) with a key drawn from the job's key
  distribution (`job.keys`, `job.key_distribution`); the router (testbed/live/job_flow.py) forwards
  them to RabbitMQ's consistent-hash exchange, which sends each key to one of the n bound worker
  queues. Before the run, one probe item per key and scale-out measures where the exchange sends
  every key, which gives the shares s_w and the nominal capacity C(n) = worker_rate / max s_w.
* **Rates:** the workload, compressed in time (testbed/live/job_compression.py), is scaled so that
  its peak is `job.peak_fraction` x C(`job.capacity_workers`), as in the simulator.
* **Rescale = stop the world:** the router pauses; every worker closes its channel without
  acknowledging (the broker requeues what it processed since its last checkpoint and what it had
  not started) and drops its uncommitted state; the worker queues are rebound for n'; everything in
  the old queues is moved through the exchange again (so the new assignment of keys applies); new
  workers start, removed ones go; after the drawn downtime (`job.downtime_*_s`, at least what this
  took) the workers consume again and the router resumes. Items processed again after a restart
  count once in the state and in latency (their checkpoint commits them once).
* **Measurements, per second:** arrivals (the source's count), each worker's processed items (its
  count in Redis), its CPU (cgroup usage over the second / its quota, testbed/live/job_cpu.py) and
  the lag (entry backlog + the worker queues' ready items). The controllers see the same
  `JobSnapshot` as in the simulator, every `policy.interval_s` seconds.
* **Accounting** at the end (after every worker's final checkpoint): emitted = committed + still
  queued (entry, worker queues) + dead-lettered; processed - committed = items processed again
  (the replays); the keyed state's total = committed.

Whatever ends the run, `finally` removes its containers, queues and Redis keys; the caller marks
the manifest incomplete on an exception.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from operators.keyed_job import dead_queue, entry_queue, key_exchange, redis_key, worker_name, worker_queue
from testbed.actions import ActionRecord
from testbed.job_tables import job_tables
from testbed.config import ExperimentConfig
from testbed.live.engines import INSTANCE_LABEL, RUN_LABEL, EngineError, connect, docker_name, missing_images
from testbed.live.job_compression import compress_rates
from testbed.live.job_cpu import cpu_fraction, find_usage_path, read_usage_ns
from testbed.live.job_flow import ItemSource, Router, connect as amqp_connect
from testbed.live.job_routing import (RING_WEIGHT, InflightGate, capacity, inflight_limit, key_names, rebinding,
                                      worker_shares)
from testbed.live.run import run_prefix
from testbed.model import ScaleDown, ScaleUp
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.rng import stream
from testbed.run_result import RunResult
from testbed.sim.job import key_weights

log = logging.getLogger(__name__)

WORKER_ENTRYPOINT = ["/bin/sh", "-c", "trap '' TERM; exec python3 -m operators.keyed_worker"]
CONSISTENT_HASH = "x-consistent-hash"


class LiveJobError(RuntimeError):
    """The live job cannot go on (engine, broker, workers); says which."""


@dataclass
class WorkerContainer:
    index: int
    container: object  # docker SDK Container
    usage_path: Optional[Path]
    started_at: float  # run time the start was asked
    running_at: Optional[float] = None


@dataclass
class JobAccounting:
    """Where every emitted item ended (after the workers' final checkpoints)."""

    emitted: int
    committed: int  # processed and committed by a checkpoint: counted in the keyed state once
    processed: int  # every processing, replays included
    replayed: int  # processed - committed: processing a restart rolled back
    queued_entry: int
    queued_workers: int
    dead_lettered: int
    state_total: int  # sum of the keyed state's counts (must equal committed)
    missing: int  # emitted - committed - queued - dead (0 when every item is accounted for)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Series:
    """The per-second measurements (row t: live second t, ending at t + 1)."""

    top: int
    arrivals: List[int] = field(default_factory=list)
    thr: List[np.ndarray] = field(default_factory=list)
    cpu: List[np.ndarray] = field(default_factory=list)
    lag: List[float] = field(default_factory=list)
    uptime: List[float] = field(default_factory=list)
    parallel: List[int] = field(default_factory=list)
    running: List[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lag)


class LiveJobRun:
    SAMPLE_S = 1.0

    def __init__(self, cfg: ExperimentConfig, policy, pattern, seed: int, run_id: str, run_dir: Optional[Path] = None):
        self.cfg = cfg
        self.job = cfg.job
        self.live = cfg.backend.live
        self.settings = cfg.backend.live.job
        self.policy = policy
        self.seed = seed
        self.run_id = run_id
        self.run_dir = run_dir
        self.prefix = f"{run_prefix(run_id)}-{uuid.uuid4().hex[:8]}".lower()
        rates = getattr(pattern, "rates", None)
        if rates is None:
            raise ValueError(f"job mode needs a rate workload (pattern kind daedalus), got {type(pattern).__name__}")
        self.duration = int(round(cfg.duration_min * 60.0))  # live seconds (the config is compressed already)
        live_rates = compress_rates(np.asarray(rates, dtype=float), self.settings.time_compression)
        if len(live_rates) < self.duration:
            live_rates = np.concatenate([live_rates, np.full(self.duration - len(live_rates), live_rates[-1])])
        self.pattern_rates = live_rates[: self.duration]
        self.top = self.job.max_scaleout
        self.weights = key_weights(self.job)
        self.keys = key_names(self.job.keys)
        self.rng_down = stream(seed, "job/downtime")
        self.records: List[ActionRecord] = []
        self.rescales: Dict[str, list] = {k: [] for k in ("t_s", "from_n", "to_n", "downtime_s", "replayed", "lag_before",
                                                         "recovered_s", "capacity_before", "capacity_after")}
        self.workers: Dict[int, WorkerContainer] = {}
        self.instance_log: List[dict] = []
        self.n = 0
        self.epoch = 0
        self.down = False
        self.up_since = 0.0
        self.ready_from: Dict[int, float] = {}
        self._t0: Optional[float] = None
        self._lock = threading.Lock()
        self.series = Series(self.top)
        self.sampler_error: Optional[BaseException] = None
        self._rolled_back = 0  # processed - committed at the last stop-the-world
        self._incarnation = itertools.count()  # container names stay unique while a removed one goes
        self.arrivals_plan: np.ndarray = np.zeros(0, dtype=int)

    def now(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        import redis

        engine_url = self.live.engines[0].url
        self.docker = connect(engine_url)
        missing = missing_images(self.docker, [self.settings.image])
        if missing:
            raise EngineError(engine_url, f"image {missing[0]} missing: build it with `bash infra/images.sh` "
                                          f"(or `make images`)")
        self.redis = redis.Redis.from_url(self.live.redis_url)
        source: Optional[ItemSource] = None
        router: Optional[Router] = None
        sampler: Optional[threading.Thread] = None
        self._stop_sampling = threading.Event()
        try:
            self._declare()
            owners = self._probe()
            shares = {n: worker_shares(owners[n], dict(zip(self.keys, self.weights)), n) for n in owners}
            self.capacity = {n: capacity(self.settings.worker_rate, s) for n, s in shares.items()}
            peak = float(self.pattern_rates.max()) if len(self.pattern_rates) else 0.0
            target_peak = self.job.peak_fraction * self.capacity[min(self.job.capacity_workers, self.top)]
            rates = self.pattern_rates * (target_peak / peak if peak > 0 else 0.0)
            cum = np.floor(np.cumsum(rates))
            arrivals = np.diff(np.concatenate([[0.0], cum])).astype(int)
            self.arrivals_plan = arrivals
            start = getattr(self.policy, "initial_parallelism", lambda m: None)(self.top)
            n0 = int(start or self.job.initial_parallelism)
            self.redis.set(self._key("control"), "stop:0")
            self._start_workers(range(n0), 0.0)
            self._wait_phase(range(n0), "idle:", self.settings.start_timeout_s, "start")
            self._bind(*rebinding(0, n0))
            self.n = n0
            self.epoch = 1
            self.redis.set(self._key("control"), f"run:{self.epoch}")
            gate = InflightGate(inflight_limit(self.settings.inflight_s, self.settings.worker_rate, n0))
            router = Router(self.live.amqp_url, self.prefix, gate, self._processed_total)
            source = ItemSource(self.live.amqp_url, self.prefix, arrivals, self.keys, self.weights,
                                stream(self.seed, "job/keys-drawn"))
            self._t0 = time.monotonic()
            router.start()
            source.start(self._t0)
            sampler = threading.Thread(target=self._sample_loop, args=(source, router), name="job-sampler", daemon=True)
            sampler.start()
            self._control_loop(source, router)
            source.stop()
            end = self.now()
            if not router.pause(self.settings.stop_timeout_s):
                raise LiveJobError("the router did not pause at the end of the run")
            self._stop_sampling.set()
            sampler.join()
            accounting = self._final(source, router)
            self.series.arrivals = [source.per_second[k] if k < len(source.per_second) else 0
                                    for k in range(len(self.series))]  # what was published, for the tables
            tables = self._tables(source.t0_wall or time.time())
            details = {"job": {"mu": self.settings.worker_rate, "capacity": {str(n): c for n, c in self.capacity.items()},
                               "shares": {str(n): s for n, s in shares.items()}, "peak_rate": target_peak,
                               "items": accounting.emitted, "unprocessed_at_end": accounting.queued_entry
                               + accounting.queued_workers, "measured_worker_rate": self._measured_rate(),
                               "live": True},
                       "prefix": self.prefix, "accounting": accounting.as_dict(), "instances": self.instance_log,
                       "time_compression": self.settings.time_compression}
            run_details = getattr(self.policy, "run_details", None)
            if run_details is not None:
                details["controller"] = run_details()
            print(f"live job {self.run_id}: {end:.0f} s, {len(self.rescales['t_s'])} rescale(s), "
                  f"accounting {accounting.as_dict()}", file=sys.stderr, flush=True)
            return RunResult(tables, float(len(self.series)), details)
        finally:
            self._stop_sampling.set()
            for part in (source, router):
                if part is not None:
                    try:
                        part.stop()
                    except Exception as exc:  # cleanup goes on
                        log.warning("stopping %s: %s", type(part).__name__, exc)
            if sampler is not None:
                sampler.join(5.0)
            self._cleanup()

    # -- broker set-up -------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return redis_key(self.prefix, name)

    def _declare(self) -> None:
        import pika.exceptions

        conn = amqp_connect(self.live.amqp_url)
        try:
            ch = conn.channel()
            try:
                ch.exchange_declare(key_exchange(self.prefix), exchange_type=CONSISTENT_HASH, auto_delete=False)
            except pika.exceptions.ChannelClosedByBroker as exc:
                raise LiveJobError(f"RabbitMQ refused the {CONSISTENT_HASH} exchange ({exc}): enable the plugin "
                                   f"with `bash infra/services.sh install` (rabbitmq_consistent_hash_exchange)") from exc
            ch.queue_declare(entry_queue(self.prefix))
            ch.queue_declare(dead_queue(self.prefix))
            for w in range(self.top):
                ch.queue_declare(worker_queue(self.prefix, w), arguments={
                    "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_queue(self.prefix)})
        finally:
            conn.close()

    def _bind(self, bind: Sequence[int], unbind: Sequence[int]) -> None:
        conn = amqp_connect(self.live.amqp_url)
        try:
            ch = conn.channel()
            for w in bind:
                ch.queue_bind(worker_queue(self.prefix, w), key_exchange(self.prefix), routing_key=str(RING_WEIGHT))
            for w in unbind:
                ch.queue_unbind(worker_queue(self.prefix, w), key_exchange(self.prefix), routing_key=str(RING_WEIGHT))
        finally:
            conn.close()

    def _probe(self) -> Dict[int, Dict[str, int]]:
        """For every scale-out n: the worker each key goes to, from one probe item per key through
        the exchange with queues 0..n-1 bound (the ring grows as a rescale grows it)."""
        import pika

        owners: Dict[int, Dict[str, int]] = {}
        conn = amqp_connect(self.live.amqp_url)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for n in range(1, self.top + 1):
                ch.queue_bind(worker_queue(self.prefix, n - 1), key_exchange(self.prefix), routing_key=str(RING_WEIGHT))
                for k in self.keys:
                    ch.basic_publish(key_exchange(self.prefix), k, k.encode(), pika.BasicProperties(delivery_mode=1),
                                     mandatory=True)
                owner: Dict[str, int] = {}
                for w in range(n):
                    while True:
                        method, _p, body = ch.basic_get(worker_queue(self.prefix, w), auto_ack=True)
                        if method is None:
                            break
                        owner[body.decode()] = w
                if set(owner) != set(self.keys):
                    raise LiveJobError(f"probe with {n} workers: {len(owner)} of {len(self.keys)} keys came back")
                owners[n] = owner
            for w in range(self.top):
                ch.queue_unbind(worker_queue(self.prefix, w), key_exchange(self.prefix), routing_key=str(RING_WEIGHT))
        finally:
            conn.close()
        return owners

    # -- workers --------------------------------------------------------------------------------------
    def _worker_env(self, w: int) -> Dict[str, str]:
        s = self.settings
        return {"RUN_PREFIX": self.prefix, "WORKER": str(w), "AMQP_URL": self.live.amqp_url,
                "REDIS_URL": self.live.redis_url, "BURN_MS": str(s.burn_ms), "PREFETCH": str(s.prefetch),
                "CHECKPOINT_S": str(self.job.checkpoint_s), "LATENCY_EVERY": str(s.latency_every)}

    def _start_one(self, w: int, t: float) -> WorkerContainer:
        c = self.docker.containers.run(
            self.settings.image, entrypoint=WORKER_ENTRYPOINT, detach=True, init=True,
            name=docker_name(self.prefix, "w", w, next(self._incarnation)), environment=self._worker_env(w),
            labels={RUN_LABEL: self.prefix, INSTANCE_LABEL: worker_name(w)},
            nano_cpus=int(self.settings.cpus * 1e9), network_mode=self.live.network_mode)
        return WorkerContainer(w, c, find_usage_path(c.id), t)

    def _start_workers(self, indices, t: float) -> None:
        indices = list(indices)
        if not indices:
            return
        with ThreadPoolExecutor(max_workers=min(4, len(indices))) as pool:
            for wc in pool.map(lambda w: self._start_one(w, t), indices):
                with self._lock:
                    self.workers[wc.index] = wc
                self.instance_log.append({"worker": worker_name(wc.index), "container": wc.container.name,
                                          "requested_at": t, "cgroup": str(wc.usage_path or "")})

    def _remove_workers(self, indices, t: float) -> None:
        gone = []
        with self._lock:
            for w in indices:
                wc = self.workers.pop(w, None)
                if wc is not None:
                    gone.append(wc)
        for wc in gone:
            self.instance_log.append({"worker": worker_name(wc.index), "container": wc.container.name, "removed_at": t})

        def remove(wc: WorkerContainer) -> None:
            try:
                wc.container.remove(force=True)
            except Exception as exc:  # the run's cleanup tries again
                log.warning("removing %s: %s", wc.container.name, exc)

        for wc in gone:  # in the background: a removal on a loaded engine takes seconds
            threading.Thread(target=remove, args=(wc,), daemon=True).start()

    def _wait_phase(self, indices, phase: str, timeout_s: float, what: str) -> None:
        names = [worker_name(w) for w in indices]
        deadline = time.monotonic() + timeout_s
        while True:
            raw = self.redis.hmget(self._key("phase"), names) if names else []
            got = [(r or b"").decode() for r in raw]
            if all(g == phase for g in got):
                return
            for w in indices:
                wc = self.workers.get(w)
                if wc is not None:
                    wc.container.reload()
                    if wc.container.status == "exited":
                        tail = wc.container.logs(tail=20).decode(errors="replace")
                        raise LiveJobError(f"worker {worker_name(w)} exited during {what}:\n{tail}")
            if time.monotonic() > deadline:
                late = [n for n, g in zip(names, got) if g != phase]
                raise LiveJobError(f"workers {late} did not report {phase!r} within {timeout_s:.0f} s ({what})")
            time.sleep(0.1)

    def _processed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self._key("processed")))

    # -- measurements --------------------------------------------------------------------------------
    def _sample_loop(self, source: ItemSource, router: Router) -> None:
        try:
            import redis

            client = redis.Redis.from_url(self.live.redis_url)
            conn = amqp_connect(self.live.amqp_url)
            ch = conn.channel()
            last_proc: Dict[str, int] = {}
            last_use: Dict[int, int] = {}
            last_t = time.monotonic()
            k = 0
            while not self._stop_sampling.is_set():
                due = self._t0 + (k + 1) * self.SAMPLE_S
                while time.monotonic() < due and not self._stop_sampling.is_set():
                    conn.process_data_events(time_limit=min(0.05, max(0.0, due - time.monotonic())))
                if self._stop_sampling.is_set():
                    break
                now = time.monotonic()
                dt = now - last_t
                last_t = now
                with self._lock:
                    workers = dict(self.workers)
                    n, down = self.n, self.down
                proc = {key.decode(): int(v) for key, v in client.hgetall(redis_key(self.prefix, "processed")).items()}
                thr = np.zeros(self.top)
                cpu = np.full(self.top, np.nan)
                for w, wc in workers.items():
                    name = worker_name(w)
                    thr[w] = max(0, proc.get(name, 0) - last_proc.get(name, 0))
                    use = self._usage(wc)
                    if use is not None and w in last_use:
                        cpu[w] = min(1.5, cpu_fraction(last_use[w], use, dt, self.settings.cpus))
                    if use is not None:
                        last_use[w] = use
                for w in list(last_use):
                    if w not in workers:
                        del last_use[w]
                last_proc = proc
                waiting = 0
                for w in range(self.top):
                    waiting += ch.queue_declare(worker_queue(self.prefix, w), passive=True).method.message_count
                forwarded = router.forwarded  # read first: forwarded <= emitted at any moment, so the backlog >= 0
                backlog = source.emitted - forwarded
                t_end = k + 1.0
                s = self.series
                # what the source published in second k (its plan while it is still catching up)
                s.arrivals.append(source.per_second[k] if k < len(source.per_second) else int(self.arrivals_plan[k]))
                s.thr.append(thr)
                s.cpu.append(cpu)
                s.lag.append(float(backlog + waiting))
                s.uptime.append(0.0 if down else t_end - self.up_since)
                s.parallel.append(n)
                s.running.append(0 if down else n)
                k += 1
            conn.close()
            client.close()
        except BaseException as exc:
            self.sampler_error = exc

    def _usage(self, wc: WorkerContainer) -> Optional[int]:
        if wc.usage_path is None:
            wc.usage_path = find_usage_path(wc.container.id)
        if wc.usage_path is None:
            return None
        try:
            return read_usage_ns(wc.usage_path)
        except (OSError, ValueError):
            return None  # the container is going away

    def _measured_rate(self) -> float:
        """Items/s of a worker at its whole quota, from the worker-seconds above 90 % CPU."""
        thr = np.array(self.series.thr)
        cpu = np.array(self.series.cpu)
        if not thr.size:
            return math.nan
        busy = np.isfinite(cpu) & (cpu >= 0.9)
        return float((thr[busy] / cpu[busy]).mean()) if busy.any() else math.nan

    # -- control ---------------------------------------------------------------------------------------
    def _control_loop(self, source: ItemSource, router: Router) -> None:
        interval = getattr(self.policy, "interval_s", None)
        next_decision = float(interval) if interval else math.inf
        next_progress = 60.0
        while True:
            for part in (source, router):
                if part.error is not None:
                    raise LiveJobError(f"the {type(part).__name__} failed: {part.error!r}") from part.error
            if self.sampler_error is not None:
                raise LiveJobError(f"measurements failed: {self.sampler_error!r}") from self.sampler_error
            done = len(self.series)
            if done >= self.duration:
                return
            if done >= next_progress:
                next_progress += 60.0
                print(f"live job {self.run_id}: {done}/{self.duration} s, {self.n} worker(s), lag "
                      f"{self.series.lag[-1]:.0f}, {len(self.rescales['t_s'])} rescale(s)", file=sys.stderr, flush=True)
            if done >= next_decision - 1e-9 and done < self.duration:
                next_decision += interval
                t = done - 1
                snap = self._snapshot(t)
                actions = self.policy.decide(snap)
                target = self.n + sum(isinstance(a, ScaleUp) for a in actions) - sum(isinstance(a, ScaleDown) for a in actions)
                target = min(max(target, 1), self.top)
                if target != self.n:
                    self._rescale(float(done), target, actions, router)
                    next_decision = max(next_decision, len(self.series) + 0.0)
                continue
            time.sleep(0.05)

    def _snapshot(self, t: int) -> JobSnapshot:
        s = self.series
        lo = max(0, t + 1 - self.job.window_s)
        sl = slice(lo, t + 1)
        thr = np.array(s.thr[sl])
        cpu = np.array(s.cpu[sl])
        workers = {worker_name(w): w for w in range(self.n)}
        return JobSnapshot(
            t=float(t + 1), parallelism=self.n, max_scaleout=self.top, checkpoint_s=self.job.checkpoint_s,
            lag=float(s.lag[t]), seconds=np.arange(lo + 1, t + 2, dtype=float),
            workload=np.array(s.arrivals[sl], dtype=float),
            throughput={k: thr[:, w].copy() for k, w in workers.items()},
            cpu={k: cpu[:, w].copy() for k, w in workers.items()}, uptime=np.array(s.uptime[sl]),
            ready={k: self.ready_from.get(w, 0.0) <= t + 1 for k, w in workers.items()})

    def _rescale(self, now: float, target: int, actions, router: Router) -> None:
        """Stop the world, rebind, move the queued items, change the workers, wait out the downtime, go."""
        old = self.n
        for a in actions:
            inst = a.instance if isinstance(a, ScaleDown) else None
            self.records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
        lo, hi = self.job.downtime_out_s if target > old else self.job.downtime_in_s
        drawn = float(self.rng_down.uniform(lo, hi))
        t_start = self.now()
        lag_before = self.series.lag[-1] if self.series.lag else 0.0
        if not router.pause(self.settings.stop_timeout_s):
            raise LiveJobError(f"the router did not pause for the rescale at {now:.0f} s")
        with self._lock:
            self.down = True
        stop_epoch = self.epoch
        self.redis.set(self._key("control"), f"stop:{stop_epoch}")
        self._wait_phase(range(old), f"stopped:{stop_epoch}", self.settings.stop_timeout_s, "the stop-the-world")
        # processing since the workers' last checkpoints is rolled back: it is replayed after the restart
        rolled_back = self._processed_total() - self._committed_total()
        replayed, self._rolled_back = rolled_back - self._rolled_back, rolled_back
        self._bind(*rebinding(old, target))
        moved = self._move(old)
        self._remove_workers(range(target, old), self.now())
        self._start_workers(range(old, target), self.now())
        if target > old:
            self._wait_phase(range(old, target), "idle:", self.settings.start_timeout_s, "the rescale's start")
        with self._lock:
            self.n = target
        for w in range(old, target):
            self.ready_from[w] = math.inf
        rest = t_start + drawn - self.now()
        if rest > 0:
            time.sleep(rest)
        self.epoch += 1
        self.redis.set(self._key("control"), f"run:{self.epoch}")
        self._wait_phase(range(target), f"running:{self.epoch}", self.settings.start_timeout_s, "the restart")
        up = self.now()
        with self._lock:
            self.down = False
            self.up_since = math.ceil(up)
        for w in range(old, target):
            self.ready_from[w] = up
        router.resume(moved, inflight_limit(self.settings.inflight_s, self.settings.worker_rate, target))
        downtime = up - t_start
        self.records.append(ActionRecord(now, "restart", JOB_OPERATOR, None, None, None,
                                         f"stop the world {old} -> {target} workers: downtime {downtime:.1f} s "
                                         f"(drawn {drawn:.1f} s), {replayed} item(s) processed since the "
                                         f"checkpoints replayed, {moved} item(s) re-routed"))
        for key, value in (("t_s", now), ("from_n", old), ("to_n", target), ("downtime_s", downtime),
                           ("replayed", int(replayed)), ("lag_before", float(lag_before)), ("recovered_s", math.nan),
                           ("capacity_before", self.capacity.get(old, math.nan)),
                           ("capacity_after", self.capacity.get(target, math.nan))):
            self.rescales[key].append(value)
        print(f"live job {self.run_id}: rescale {old} -> {target} at {now:.0f} s, downtime {downtime:.1f} s, "
              f"{moved} item(s) re-routed", file=sys.stderr, flush=True)

    def _committed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self._key("committed")))

    def _move(self, old: int) -> int:
        """Every item in the queues of workers 0..old-1 through the exchange again, under the new
        binding (a queue that stays bound gets some back: only its items from before are taken)."""
        import pika

        conn = amqp_connect(self.live.amqp_url)
        moved = 0
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=1)
            for w in range(old):
                q = worker_queue(self.prefix, w)
                count = ch.queue_declare(q, passive=True).method.message_count
                for _ in range(count):
                    method, _p, body = ch.basic_get(q, auto_ack=False)
                    if method is None:
                        break
                    ch.basic_publish(key_exchange(self.prefix), method.routing_key, body, props, mandatory=True)
                    ch.basic_ack(method.delivery_tag)
                    moved += 1
        finally:
            conn.close()
        return moved

    # -- the end -------------------------------------------------------------------------------------
    def _final(self, source: ItemSource, router: Router) -> JobAccounting:
        """Every worker commits its last checkpoint and stops; then every item is accounted for."""
        self.redis.set(self._key("control"), f"final:{self.epoch}")
        self._wait_phase(range(self.n), f"final:{self.epoch}", self.settings.stop_timeout_s, "the final checkpoint")
        router.stop()  # its connection closes: what it held goes back to the entry queue
        conn = amqp_connect(self.live.amqp_url)
        try:
            ch = conn.channel()

            def depths():
                d = lambda q: ch.queue_declare(q, passive=True).method.message_count  # noqa: E731
                return (d(entry_queue(self.prefix)), sum(d(worker_queue(self.prefix, w)) for w in range(self.top)),
                        d(dead_queue(self.prefix)))

            # the broker requeues what closed channels held: read until two readings agree
            now, before = depths(), None
            deadline = time.monotonic() + self.settings.stop_timeout_s
            while now != before and time.monotonic() < deadline:
                time.sleep(0.5)
                before, now = now, depths()
            entry, workers, dead = now
        finally:
            conn.close()
        committed = self._committed_total()
        processed = self._processed_total()
        state = sum(int(v) for v in self.redis.hvals(self._key("state")))
        return JobAccounting(emitted=source.emitted, committed=committed, processed=processed,
                             replayed=processed - committed, queued_entry=entry, queued_workers=workers,
                             dead_lettered=dead, state_total=state,
                             missing=source.emitted - committed - entry - workers - dead)

    def _latency(self, t0_wall: float):
        raw = self.redis.lrange(self._key("latency"), 0, -1)
        t, ms = [], []
        for r in raw:
            done, lat = r.decode().split(",")
            t.append(int(done) / 1000.0 - t0_wall)
            ms.append(float(lat))
        order = np.argsort(t)
        return [t[i] for i in order], [ms[i] for i in order]

    def _tables(self, t0_wall: float) -> Dict[str, Dict[str, list]]:
        s = self.series
        D = len(s)
        thr = np.array(s.thr) if D else np.zeros((0, self.top))
        cpu = np.array(s.cpu) if D else np.zeros((0, self.top))
        lag = np.array(s.lag)
        arrivals = np.array(s.arrivals, dtype=np.int64)
        # recovery of each rescale: the first second after it whose lag is back to before
        for i, t_s in enumerate(self.rescales["t_s"]):
            start = int(t_s + self.rescales["downtime_s"][i])
            for t in range(start, D):
                if lag[t] <= max(self.rescales["lag_before"][i], arrivals[t]):
                    self.rescales["recovered_s"][i] = t + 1 - t_s
                    break
        lat_t, lat_ms = self._latency(t0_wall)
        return job_tables(max(1, int(round(self.cfg.runtime.monitoring_s))), arrivals, thr, cpu, lag, s.parallel,
                          s.running, lat_t, lat_ms, self.records, self.policy, self.rescales)

    def _cleanup(self) -> None:
        """Remove the run's containers, queues and Redis keys (also after an interrupt)."""
        try:
            for c in self.docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.prefix}"}):
                try:
                    c.remove(force=True)
                except Exception as exc:
                    log.warning("removing %s: %s", c.name, exc)
        except Exception as exc:
            log.warning("listing the containers of %s: %s", self.prefix, exc)
        if self.live.keep_broker_state:
            return
        try:
            conn = amqp_connect(self.live.amqp_url)
            try:
                ch = conn.channel()
                for q in [entry_queue(self.prefix), dead_queue(self.prefix),
                          *(worker_queue(self.prefix, w) for w in range(self.top))]:
                    ch.queue_delete(q)
                ch.exchange_delete(key_exchange(self.prefix))
            finally:
                conn.close()
            keys = list(self.redis.scan_iter(f"{self.prefix}:*", count=1000))
            if keys:
                self.redis.delete(*keys)
        except Exception as exc:  # cleanup must not hide the run's own outcome
            log.warning("could not remove the broker/Redis state of %s: %s", self.prefix, exc)
