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

* **Faults** (docs/papers/daedalus.md#faults-during-a-live-job-run): a worker container that exits
  (killed, crashed) is replaced and the job restarts from its checkpoints at the same parallelism
  (`_recover`: a stop-the-world without a drawn downtime; what it processed since its checkpoint is
  replayed; ids its last checkpoint committed but did not acknowledge are dropped from the queues),
  at most `backend.live.job.max_recoveries` times. A lost RabbitMQ connection (a broker restart takes
  the job's transient queues and their items with it) and a Redis that restarted, lost the run's keys
  or stayed away for `REDIS_OUTAGE_S` end the run with `LiveJobError`: one line naming the service and
  the time. A worker that exits during a restart's stop or start is replaced within that restart,
  under the same budget (`RestartExits`); one that exits once the job runs again is left to the
  watchdog; the final checkpoint's wait ends the run naming it. Every wait has a bound (start and stop
  timeouts, `STALL_S` without a measurement, `BROKER_WAIT_S`, `CLEANUP_WAIT_S`).

Whatever ends the run, `finally` removes its containers, queues and Redis keys (waiting, bounded,
for a broker or Redis that is coming back); the caller marks the manifest incomplete with the
`LiveJobError`'s one-line reason.
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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from operators.keyed_job import dead_queue, entry_queue, key_exchange, redis_key, worker_name, worker_queue
from testbed.actions import ActionRecord
from testbed.config import ExperimentConfig
from testbed.job.engine import Second
from testbed.job.inputs import job_snapshot
from testbed.job.series import JobSeries
from testbed.job.tables import job_tables, new_rescales
from testbed.live.engines import INSTANCE_LABEL, RUN_LABEL, EngineError, connect, docker_name, missing_images
from testbed.live.job_compression import compress_rates
from testbed.live.job_cpu import cpu_fraction, find_usage_path, read_usage_ns
from testbed.live.job_flow import ItemSource, Router
from testbed.live.job_flow import connect as amqp_connect
from testbed.live.job_routing import (
    RING_WEIGHT,
    InflightGate,
    Outage,
    capacity,
    committed_id,
    inflight_limit,
    key_names,
    last_log_line,
    parse_ids,
    rebinding,
    redis_loss,
    retry_until,
    worker_shares,
)
from testbed.live.run import run_prefix
from testbed.messages import one_line
from testbed.model import ScaleDown
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.scaling import job_rescale
from testbed.rng import stream
from testbed.run_result import RunResult, verdict
from testbed.sim.job import key_weights

log = logging.getLogger(__name__)

WORKER_ENTRYPOINT = ["/bin/sh", "-c", "trap '' TERM; exec python3 -m operators.keyed_worker"]
CONSISTENT_HASH = "x-consistent-hash"


class LiveJobError(RuntimeError):
    """The live job cannot go on (engine, broker, workers); says which."""


@dataclass
class WorkerContainer:
    index: int
    container: Any  # docker SDK Container
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
class _LastReading:
    """The sampler's previous reading: when, processed per worker, CPU time per worker."""

    t: float
    processed: Dict[str, int] = field(default_factory=dict)
    usage: Dict[int, Tuple[str, int]] = field(default_factory=dict)  # worker -> (its container, CPU time)


class RestartExits:
    """Workers that exit during a restart's stop or start (killed, crashed): within the recovery
    budget each is replaced within that restart (one meant to go with a scale-in just goes) and
    recorded as a recovery; past it the run ends naming the first. `spent`: exits the restart
    itself replaces (a recovery's)."""

    def __init__(self, run: "LiveJobRun", spent: int, restart: str):
        self.run, self.spent, self.restart = run, spent, restart
        self.exits: List[Tuple[int, dict]] = []  # (worker index, what the recovery records)

    def accept(self, exited: List[Tuple[int, WorkerContainer, int]], during: str) -> None:
        run, t = self.run, self.run.now()
        used = len(run.recoveries) + self.spent + len(self.exits)
        if used + len(exited) > run.settings.max_recoveries:
            raise LiveJobError(f"{run._exit_message(*exited[0])} during {during} of {self.restart} at t={t:.0f} s, "
                               f"with {used} worker(s) replaced already "
                               f"(backend.live.job.max_recoveries = {run.settings.max_recoveries})")
        for w, wc, code in exited:
            message = run._exit_message(w, wc, code)
            print(f"live job {run.run_id}: {message} during {during} of {self.restart} at t={t:.0f} s: "
                  f"the restart replaces it", file=sys.stderr, flush=True)
            self.exits.append((w, {"t_s": t, "worker": worker_name(w), "container": wc.container.name,
                                   "exit_code": code, "during": f"{during} of {self.restart}", "message": message}))
        run._remove_workers([e[0] for e in exited], run.now())

    def record(self, t_s: float, target: int, info: dict) -> None:
        """Once the restart is done: an action and a recovery per exit, with the restart's figures."""
        for w, e in self.exits:
            replaced = w < target
            self.run.records.append(ActionRecord(
                t_s, "replace", JOB_OPERATOR, e["worker"], None, None,
                f"{e['message']} during {e['during']} at t={e['t_s']:.0f} s: "
                + ("replaced within the restart" if replaced else "not replaced, the rescale removes it")))
            self.run.recoveries.append({**{k: v for k, v in e.items() if k != "message"}, "downtime_s":
                                        info["downtime_s"], "replayed": info["replayed"], "moved": info["moved"],
                                        "duplicates_dropped": info["duplicates_dropped"]})


class LiveJobRun:
    SAMPLE_S = 1.0
    REDIS_OUTAGE_S = 10.0  # Redis unreachable for longer: the run ends (its counts and checkpoints are there)
    BROKER_WAIT_S = 30.0  # after a lost broker connection: how long to wait for the broker to say what it lost
    STALL_S = 30.0  # no measurement for this long (outside a restart): the run ends
    DEAD_CHECK_S = 1.0  # how often the engine is asked for exited workers
    CLEANUP_WAIT_S = 60.0  # the clean-up waits this long for a broker or Redis that is coming back

    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern, seed: int, run_id: str,
                 run_dir: Optional[Path] = None):
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
            raise ValueError(f"job mode needs a workload with rates (items/s per second), got {type(pattern).__name__}")
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
        self.rescales: Dict[str, list] = new_rescales()
        self.workers: Dict[int, WorkerContainer] = {}
        self.instance_log: List[dict] = []
        self.n = 0
        self.epoch = 0
        self.down = False
        self.up_since = 0.0
        self.ready_from: Dict[int, float] = {}
        self._t0: Optional[float] = None
        self._lock = threading.Lock()
        self.series = JobSeries(self.top, self.duration)
        self.sampler_error: Optional[BaseException] = None
        self._rolled_back = 0  # processed - committed at the last stop-the-world
        self._incarnation = itertools.count()  # container names stay unique while a removed one goes
        self.arrivals_plan: np.ndarray = np.zeros(0, dtype=int)
        self.fault: Optional[str] = None  # why the run cannot go on, found by the sampler (one line)
        self.recoveries: List[dict] = []  # workers that exited and were replaced
        self.redis_run_id = ""
        self._state_written = False
        self._source: Optional[ItemSource] = None
        self._router: Optional[Router] = None

    def now(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        import pika.exceptions
        import redis

        self._connect_engine()
        self.redis = self._redis_client()
        self._sampler: Optional[threading.Thread] = None
        self._stop_sampling = threading.Event()
        try:
            self.redis_run_id = self._redis_id(self.redis)
            self._declare()
            shares, target_peak = self._plan_arrivals()
            source, router = self._start_job()
            self._sampler = threading.Thread(target=self._sample_loop, args=(source, router), name="job-sampler",
                                             daemon=True)
            self._sampler.start()
            self._control_loop(source, router)
            return self._finish(source, router, shares, target_peak)
        except (redis.RedisError, pika.exceptions.AMQPError, LiveJobError) as exc:
            # the reason goes to the manifest: one line naming what failed and when
            reason = exc if isinstance(exc, LiveJobError) else LiveJobError(self._reason(exc, "the runtime"))
            print(f"live job {self.run_id} [prefix {self.prefix}]: incomplete: {reason}", file=sys.stderr, flush=True)
            if reason is exc:
                raise
            raise reason from exc
        finally:
            self._stop_parts()

    def _connect_engine(self) -> None:
        engine_url = self.live.engines[0].url
        self.docker = connect(engine_url)
        missing = missing_images(self.docker, [self.settings.image])
        if missing:
            raise EngineError(engine_url, f"image {missing[0]} missing: build it with `bash infra/images.sh` "
                                          f"(or `make images`)")

    def _plan_arrivals(self) -> Tuple[Dict[int, List[float]], float]:
        """Capacities from the measured key ownership, and the arrivals per second scaled so that the
        workload's peak is peak_fraction of capacity_workers' capacity: (shares per parallelism, peak rate)."""
        owners = self._probe()
        shares = {n: worker_shares(owners[n], dict(zip(self.keys, self.weights, strict=True)), n) for n in owners}
        self.capacity = {n: capacity(self.settings.worker_rate, s) for n, s in shares.items()}
        peak = float(self.pattern_rates.max()) if len(self.pattern_rates) else 0.0
        target_peak = self.job.peak_fraction * self.capacity[min(self.job.capacity_workers, self.top)]
        rates = self.pattern_rates * (target_peak / peak if peak > 0 else 0.0)
        cum = np.floor(np.cumsum(rates))
        self.arrivals_plan = np.diff(np.concatenate([[0.0], cum])).astype(int)
        return shares, target_peak

    def _start_job(self) -> Tuple[ItemSource, Router]:
        """The initial workers started and bound, then the router and the source: the run's clock starts."""
        start = self.policy.initial_parallelism(self.top)
        n0 = int(start or self.job.initial_parallelism)
        self.redis.set(self._key("control"), "stop:0")
        self._state_written = True  # from here on the control key is always there
        self._start_workers(range(n0), 0.0)
        self._wait_phase(range(n0), "idle:", self.settings.start_timeout_s, "start")
        self._bind(*rebinding(0, n0))
        self.n = n0
        self.epoch = 1
        self.redis.set(self._key("control"), f"run:{self.epoch}")
        gate = InflightGate(inflight_limit(self.settings.inflight_s, self.settings.worker_rate, n0))
        router = self._router = Router(self.live.amqp_url, self.prefix, gate, self._processed_total)
        source = self._source = ItemSource(self.live.amqp_url, self.prefix, self.arrivals_plan, self.keys,
                                           self.weights, stream(self.seed, "job/keys-drawn"))
        self._t0 = time.monotonic()
        router.start()
        source.start(self._t0)
        return source, router

    def _finish(self, source: ItemSource, router: Router, shares: Dict[int, List[float]],
                target_peak: float) -> RunResult:
        """The source stopped, the router paused, the sampler joined: account, and build the tables."""
        source.stop()
        end = self.now()
        if not router.pause(self.settings.stop_timeout_s):
            self._check_faults()
            raise LiveJobError(f"the router did not pause at the end of the run (t={self.now():.0f} s)")
        self._stop_sampling.set()
        assert self._sampler is not None
        self._sampler.join(self.STALL_S)
        self._check_faults()
        accounting = self._final(source, router)
        # what was published, for the tables
        self.series.arrivals[:] = [source.per_second[k] if k < len(source.per_second) else 0
                                   for k in range(len(self.series))]
        tables = self._tables(source.t0_wall or time.time())
        lost = self._redis_lost()  # the tables read Redis too (latencies): still the run's state?
        if lost:
            raise LiveJobError(lost)
        details = self._details(accounting, shares, target_peak)
        print(f"live job {self.run_id}: {end:.0f} s, {len(self.rescales['t_s'])} rescale(s), "
              f"{len(self.recoveries)} worker(s) replaced, accounting {accounting.as_dict()}",
              file=sys.stderr, flush=True)
        imbalances = {"missing items": accounting.missing,
                      "keyed state - committed": accounting.state_total - accounting.committed}
        return RunResult(tables, float(len(self.series)), details, incomplete=verdict(imbalances=imbalances))

    def _details(self, accounting: JobAccounting, shares: Dict[int, List[float]],
                 target_peak: float) -> Dict[str, Any]:
        details: Dict[str, Any] = {
            "job": {"mu": self.settings.worker_rate, "capacity": {str(n): c for n, c in self.capacity.items()},
                    "shares": {str(n): s for n, s in shares.items()}, "peak_rate": target_peak,
                    "items": accounting.emitted, "unprocessed_at_end": accounting.queued_entry
                    + accounting.queued_workers, "measured_worker_rate": self._measured_rate(), "live": True},
            "prefix": self.prefix, "accounting": accounting.as_dict(), "instances": self.instance_log,
            "recoveries": self.recoveries, "time_compression": self.settings.time_compression}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details

    def _stop_parts(self) -> None:
        """Whatever happened: the sampler, the source and the router stopped, the run's containers and names gone."""
        self._stop_sampling.set()
        for part in (self._source, self._router):
            if part is not None:
                try:
                    part.stop()
                except Exception as exc:  # cleanup goes on
                    log.warning("stopping %s: %s", type(part).__name__, exc)
        if self._sampler is not None:
            self._sampler.join(5.0)
        self._cleanup()

    # -- faults ----------------------------------------------------------------------------------------
    def _redis_client(self):
        """Runtime clients: a command fails within seconds while Redis is away (bounded retries)."""
        import redis
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        return redis.Redis.from_url(self.live.redis_url, socket_timeout=5, socket_connect_timeout=3,
                                    retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3))

    @staticmethod
    def _redis_id(client) -> str:
        return str(client.info("server").get("run_id", ""))

    def _redis_lost(self, client=None) -> Optional[str]:
        """Why the run's state in Redis cannot be trusted any more (it restarted, its keys are gone);
        None while it can, or while Redis does not answer (an outage is timed elsewhere)."""
        import redis

        if not self._state_written:
            return None
        client = client or self.redis
        try:
            now_id = self._redis_id(client)
            present = bool(client.exists(self._key("control")))
        except redis.RedisError:
            return None
        return redis_loss(self.now(), self.redis_run_id, now_id, present)

    def _broker_lost(self, exc: BaseException, t: float) -> str:
        """The reason of a lost broker connection: wait (bounded) for the broker and say what it lost."""
        import pika.exceptions

        what = one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, 120)
        try:
            conn = retry_until(lambda: amqp_connect(self.live.amqp_url), self.BROKER_WAIT_S, time.monotonic,
                               time.sleep, (pika.exceptions.AMQPError, OSError), 1.0)
        except (pika.exceptions.AMQPError, OSError):
            return (f"RabbitMQ unreachable since t={t:.0f} s ({what}) and not back within {self.BROKER_WAIT_S:.0f} s: "
                    f"the job's queues are on it; the run cannot go on")
        try:
            try:
                conn.channel().queue_declare(entry_queue(self.prefix), passive=True)
                gone = False
            except pika.exceptions.ChannelClosedByBroker:
                gone = True
        finally:
            if conn.is_open:
                conn.close()
        if not gone:
            return (f"RabbitMQ closed the run's connections at t={t:.0f} s ({what}); the job mode does not "
                    f"reconnect, the run cannot go on")
        emitted = self._source.emitted if self._source is not None else 0
        try:
            uncommitted = f", and with them the {max(0, emitted - self._committed_total())} item(s) not yet committed"
        except Exception:  # Redis is what failed too
            uncommitted = ""
        return (f"RabbitMQ restarted at t={t:.0f} s ({what}): the job's queues are transient and went with "
                f"it{uncommitted}; the run cannot go on")

    def _reason(self, exc: BaseException, who: str) -> str:
        """One line for the manifest: what failed (Redis' state first: losing it explains the rest)."""
        import pika.exceptions
        import redis

        t = self.now()
        lost = self._redis_lost()
        if lost:
            return lost
        if isinstance(exc, redis.RedisError):
            return f"Redis unreachable at t={t:.0f} s ({one_line(str(exc), 120)}): {who} could not go on"
        if isinstance(exc, pika.exceptions.AMQPError):
            return self._broker_lost(exc, t)
        return f"{who} failed at t={t:.0f} s: {one_line(f'{type(exc).__name__}: {exc}')}"

    def _check_faults(self) -> None:
        """Raise the reason the run cannot go on, if there is one (sampler, source, router)."""
        if self.fault:
            raise LiveJobError(self.fault)
        for part, who in ((self._source, "the source"), (self._router, "the router")):
            if part is not None and part.error is not None:
                raise LiveJobError(self._reason(part.error, who)) from part.error
        if self.sampler_error is not None:
            raise LiveJobError(self._reason(self.sampler_error, "the measurements")) from self.sampler_error

    def _diagnose_worker_exit(self) -> None:
        """A worker exited: a broker or Redis failure explains it before the worker does."""
        self._check_faults()
        lost = self._redis_lost()
        if lost:
            raise LiveJobError(lost)
        import pika.exceptions

        try:
            amqp_connect(self.live.amqp_url).close()
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise LiveJobError(self._broker_lost(exc, self.now())) from exc

    def _exited(self) -> List[Tuple[int, WorkerContainer, int]]:
        """(index, worker, exit code) of the run's current workers whose container has exited."""
        with self._lock:
            by_id = {wc.container.id: (w, wc) for w, wc in self.workers.items()}
        out = []
        for c in self.docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.prefix}",
                                                                "status": ["exited", "dead"]}):
            if c.id in by_id:
                w, wc = by_id[c.id]
                out.append((w, wc, int(c.attrs.get("State", {}).get("ExitCode", -1))))
        return sorted(out, key=lambda e: e[0])

    def _exit_message(self, w: int, wc: WorkerContainer, code: int) -> str:
        try:
            said = last_log_line(wc.container.logs(tail=5).decode(errors="replace"))
        except Exception:
            said = ""
        how = " (SIGKILL)" if code == 137 else ""
        return (f"worker {worker_name(w)} (container {wc.container.name}) exited with code {code}{how}"
                + (f", last log line: {said}" if said and code != 137 else ""))

    def _recover(self, exited: List[Tuple[int, WorkerContainer, int]], router: Router) -> None:
        """Workers exited (killed, crashed): replace them and restart the job from its checkpoints at
        the same parallelism, as a Flink job restarts after a TaskManager failure; or, past the
        budget, end the run naming the worker."""
        self._diagnose_worker_exit()
        t = self.now()
        first = exited[0]
        if len(self.recoveries) + len(exited) > self.settings.max_recoveries:
            raise LiveJobError(f"{self._exit_message(*first)} at t={t:.0f} s, with {len(self.recoveries)} worker(s) "
                               f"replaced already (backend.live.job.max_recoveries = {self.settings.max_recoveries})")
        messages = [self._exit_message(*e) for e in exited]
        for msg in messages:
            print(f"live job {self.run_id}: {msg} at t={t:.0f} s: replacing it, the job restarts from its checkpoints",
                  file=sys.stderr, flush=True)
        t_s = float(len(self.series))
        info = self._restart(t_s, self.n, router, replace=[e[0] for e in exited])
        for (w, wc, code), msg in zip(exited, messages, strict=True):
            self.records.append(ActionRecord(t_s, "replace", JOB_OPERATOR, worker_name(w), None,
                                             None, f"{msg} at t={t:.0f} s: replaced, the job restarted from its "
                                                   f"checkpoints with {self.n} workers (downtime "
                                                   f"{info['downtime_s']:.1f} s, {info['replayed']} item(s) "
                                                   f"processed since the checkpoints replayed)"))
            self.recoveries.append({"t_s": t, "worker": worker_name(w), "container": wc.container.name,
                                    "exit_code": code, "downtime_s": info["downtime_s"],
                                    "replayed": info["replayed"], "moved": info["moved"],
                                    "duplicates_dropped": info["duplicates_dropped"]})

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
                                   "with `bash infra/services.sh install` "
                                   "(rabbitmq_consistent_hash_exchange)") from exc
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

    def _wait_phase(self, indices, phase: str, timeout_s: float, what: str,
                    on_exit: Optional[Callable[[List[Tuple[int, WorkerContainer, int]], str], None]] = None
                    ) -> List[int]:
        """Until the workers report `phase`. One that exits meanwhile ends the run naming it, or with
        `on_exit` is handed to it and no longer waited for; returns those (their indices)."""
        wanted: List[int] = list(indices)
        left: List[int] = []
        names = [worker_name(w) for w in wanted]
        deadline = time.monotonic() + timeout_s
        while True:
            raw = self.redis.hmget(self._key("phase"), names) if names else []
            got = [(r or b"").decode() for r in raw]
            if all(g == phase for g in got):
                return left
            self._check_faults()
            exited = [e for e in self._exited() if e[0] in set(wanted)]
            if exited:
                self._diagnose_worker_exit()
                if on_exit is None:
                    raise LiveJobError(f"{self._exit_message(*exited[0])} during {what} at t={self.now():.0f} s")
                on_exit(exited, what)
                left += [e[0] for e in exited]
                wanted = [w for w in wanted if w not in left]
                names = [worker_name(w) for w in wanted]
                continue
            if time.monotonic() > deadline:
                lost = self._redis_lost()  # a restarted Redis forgot the phases: that is the reason
                if lost:
                    raise LiveJobError(lost)
                late = [n for n, g in zip(names, got, strict=True) if g != phase]
                raise LiveJobError(f"workers {late} did not report {phase!r} within {timeout_s:.0f} s ({what}, "
                                   f"t={self.now():.0f} s)")
            time.sleep(0.1)

    def _processed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self._key("processed")))

    # -- measurements --------------------------------------------------------------------------------
    def _sample_loop(self, source: ItemSource, router: Router) -> None:
        """One row of measurements per second. Redis away for a moment: the row is taken when it is
        back (the seconds catch up); away for longer than REDIS_OUTAGE_S, restarted or emptied: the
        run's fault. A lost broker connection is the run's fault at once."""
        import pika.exceptions

        try:
            client = self._redis_client()
            conn = amqp_connect(self.live.amqp_url)
            ch = conn.channel()
            last = _LastReading(time.monotonic())
            outage = Outage(self.REDIS_OUTAGE_S)
            k = 0
            assert self._t0 is not None  # set before the sampler starts
            while not self._stop_sampling.is_set():
                due = self._t0 + (k + 1) * self.SAMPLE_S
                while time.monotonic() < due and not self._stop_sampling.is_set():
                    conn.process_data_events(time_limit=min(0.05, max(0.0, due - time.monotonic())))
                if self._stop_sampling.is_set():
                    break
                proc, stop = self._read_processed(client, outage)
                if stop:
                    break
                if proc is None:
                    continue
                self._sample_row(k, proc, last, ch, source, router)
                k += 1
            if conn.is_open:
                conn.close()
            client.close()
        except pika.exceptions.AMQPError as exc:
            self.fault = self._reason(exc, "the measurements")
        except BaseException as exc:
            self.sampler_error = exc

    def _read_processed(self, client, outage: Outage) -> Tuple[Optional[Dict[str, int]], bool]:
        """(processed per worker or None to try again, whether the run has a fault and sampling stops)."""
        import redis

        try:
            proc = {key.decode(): int(v) for key, v in client.hgetall(redis_key(self.prefix, "processed")).items()}
            lost = self._redis_lost(client)
        except redis.RedisError as exc:
            if outage.failed(self.now()):
                self.fault = (f"Redis unreachable since t={outage.since:.0f} s ({one_line(str(exc), 120)}): "
                              f"the run's counts and checkpoints are there; the run cannot go on")
                return None, True
            time.sleep(0.2)
            return None, False
        outage.ok()
        if lost:
            self.fault = lost
            return None, True
        return proc, False

    def _sample_row(self, k: int, proc: Dict[str, int], last: _LastReading, ch, source: ItemSource,
                    router: Router) -> None:
        """Second k's row: throughput and CPU per worker, the backlog before and in the workers' queues."""
        now = time.monotonic()
        dt = now - last.t
        last.t = now
        with self._lock:
            workers = dict(self.workers)
            n, down = self.n, self.down
        thr, cpu = self._worker_rates(workers, proc, last, dt)
        waiting = 0
        for w in range(self.top):
            waiting += ch.queue_declare(worker_queue(self.prefix, w), passive=True).method.message_count
        forwarded = router.forwarded  # read first: forwarded <= emitted at any moment, so the backlog >= 0
        backlog = source.emitted - forwarded
        # what the source published in second k (its plan while it is still catching up)
        arrivals = source.per_second[k] if k < len(source.per_second) else int(self.arrivals_plan[k])
        self.series.append(Second(arrivals=float(arrivals), thr=thr, cpu=cpu, lag=float(backlog + waiting),
                                  uptime=0.0 if down else k + 1.0 - self.up_since, parallel=n,
                                  running=0 if down else n))

    def _worker_rates(self, workers: Dict[int, WorkerContainer], proc: Dict[str, int], last: _LastReading,
                      dt: float) -> Tuple[np.ndarray, np.ndarray]:
        thr = np.zeros(self.top)
        cpu = np.full(self.top, np.nan)
        for w, wc in workers.items():
            name = worker_name(w)
            thr[w] = max(0, proc.get(name, 0) - last.processed.get(name, 0))
            use = self._usage(wc)
            prev = last.usage.get(w)
            if use is not None and prev is not None and prev[0] == wc.container.id:
                cpu[w] = min(1.5, cpu_fraction(prev[1], use, dt, self.settings.cpus))
            if use is not None:
                last.usage[w] = (wc.container.id, use)
        for w in list(last.usage):
            if w not in workers:
                del last.usage[w]
        last.processed = proc
        return thr, cpu

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
        interval = self.policy.interval_s
        next_decision = float(interval) if interval else math.inf
        next_progress = 60.0
        next_check = 0.0
        rows, rows_at = -1, time.monotonic()
        while True:
            self._check_faults()
            done = len(self.series)
            if done >= self.duration:
                return
            if done != rows:
                rows, rows_at = done, time.monotonic()
            elif time.monotonic() - rows_at > self.STALL_S:
                raise LiveJobError(f"the measurements stalled at t={self.now():.0f} s (no sample for "
                                   f"{self.STALL_S:.0f} s)")
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.DEAD_CHECK_S
                exited = self._exited()
                if exited:
                    self._recover(exited, router)
                    next_decision = max(next_decision, len(self.series) + 0.0)
                    rows, rows_at = len(self.series), time.monotonic()
                    continue
            if done >= next_progress:
                next_progress += 60.0
                print(f"live job {self.run_id}: {done}/{self.duration} s, {self.n} worker(s), lag "
                      f"{self.series.lag[-1]:.0f}, {len(self.rescales['t_s'])} rescale(s)", file=sys.stderr, flush=True)
            if done >= next_decision - 1e-9 and done < self.duration:
                assert interval  # next_decision is finite only with an interval
                next_decision += interval
                t = done - 1
                snap = self._snapshot(t)
                rescale = job_rescale(self.n, self.policy.decide_job(snap), self.top)
                if rescale is not None:
                    self._rescale(float(done), *rescale, router)
                    next_decision = max(next_decision, len(self.series) + 0.0)
                    rows, rows_at = len(self.series), time.monotonic()
                continue
            time.sleep(0.05)

    def _snapshot(self, t: int) -> JobSnapshot:
        ready = {worker_name(w): self.ready_from.get(w, 0.0) <= t + 1 for w in range(self.n)}
        return job_snapshot(self.series, t, self.n, self.top, self.job.checkpoint_s, self.job.window_s, ready)

    def _rescale(self, now: float, target: int, actions, router: Router) -> None:
        """The controller's rescale: a restart from the checkpoints with `target` workers."""
        old = self.n
        for a in actions:
            inst = a.instance if isinstance(a, ScaleDown) else None
            self.records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
        lo, hi = self.job.downtime_out_s if target > old else self.job.downtime_in_s
        drawn = float(self.rng_down.uniform(lo, hi))
        lag_before = self.series.lag[-1] if len(self.series) else 0.0
        info = self._restart(now, target, router, drawn_s=drawn)
        downtime, replayed, moved = info["downtime_s"], info["replayed"], info["moved"]
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

    def _restart(self, now: float, target: int, router: Router, drawn_s: float = 0.0,
                 replace: Sequence[int] = ()) -> dict:
        """Stop the world, rebind, move the queued items, change the workers, wait out the downtime, go.
        `replace`: workers whose containers exited (a recovery): their containers go and new ones
        start under the same names; the others stop at their checkpoints as in a rescale."""
        old = self.n
        replace = sorted(set(replace))
        exits = RestartExits(self, len(replace), f"the restart {old} -> {target}")
        t_start = self.now()
        if not router.pause(self.settings.stop_timeout_s):
            self._check_faults()
            raise LiveJobError(f"the router did not pause for the restart at t={now:.0f} s")
        with self._lock:
            self.down = True
        self._remove_workers(replace, self.now())
        stop_epoch = self.epoch
        self.redis.set(self._key("control"), f"stop:{stop_epoch}")
        # a worker that exits while the world stops holds nothing more than a stopped one: the broker
        # requeued what it held, its uncommitted state is dropped anyway; it is replaced as in a recovery
        died = self._wait_phase([w for w in range(old) if w not in replace], f"stopped:{stop_epoch}",
                                self.settings.stop_timeout_s, "the stop-the-world", exits.accept)
        replace = sorted(set(replace) | set(died))
        # processing since the workers' last checkpoints is rolled back: it is replayed after the restart
        rolled_back = self._processed_total() - self._committed_total()
        replayed, self._rolled_back = rolled_back - self._rolled_back, rolled_back
        self._bind(*rebinding(old, target))
        # a replaced worker may have died between its last commit and its ack: those items are back in
        # the queues, committed already; they go (the others are redelivered and processed again)
        drop: frozenset = frozenset()
        if replace:
            for raw in self.redis.hmget(self._key("lastcommit"), [worker_name(w) for w in replace]):
                drop |= parse_ids(raw)
        moved, dropped = self._move(old, drop)
        self._remove_workers(range(target, old), self.now())
        starting = sorted(set(range(old, target)) | {w for w in replace if w < target})
        pending = starting
        while pending:  # a new worker that exits before it is idle holds nothing: another one starts
            self._start_workers(pending, self.now())
            pending = self._wait_phase(pending, "idle:", self.settings.start_timeout_s, "the restart's start",
                                       exits.accept)
        with self._lock:
            self.n = target
        for w in starting:
            self.ready_from[w] = math.inf
        rest = t_start + drawn_s - self.now()
        if rest > 0:
            time.sleep(rest)
        self.epoch += 1
        self.redis.set(self._key("control"), f"run:{self.epoch}")
        # one that exits now may have processed already: the control loop's watchdog recovers it as any other
        self._wait_phase(range(target), f"running:{self.epoch}", self.settings.start_timeout_s, "the restart",
                         lambda _exited, _what: None)
        up = self.now()
        with self._lock:
            self.down = False
            self.up_since = math.ceil(up)
        for w in starting:
            self.ready_from[w] = up
        router.resume(moved, inflight_limit(self.settings.inflight_s, self.settings.worker_rate, target))
        info = {"downtime_s": up - t_start, "replayed": int(replayed), "moved": moved, "duplicates_dropped": dropped}
        exits.record(now, target, info)
        return info

    def _committed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self._key("committed")))

    def _move(self, old: int, drop: frozenset = frozenset()) -> Tuple[int, int]:
        """Every item in the queues of workers 0..old-1 through the exchange again, under the new
        binding (a queue that stays bound gets some back: only its items from before are taken);
        items whose id is in `drop` (committed already) are removed instead. (moved, dropped)."""
        import pika

        conn = amqp_connect(self.live.amqp_url)
        moved = dropped = 0
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
                    if drop and committed_id(body) in drop:
                        ch.basic_ack(method.delivery_tag)
                        dropped += 1
                        continue
                    ch.basic_publish(key_exchange(self.prefix), method.routing_key, body, props, mandatory=True)
                    ch.basic_ack(method.delivery_tag)
                    moved += 1
        finally:
            conn.close()
        return moved, dropped

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
        lost = self._redis_lost()  # the counts below would be wrong totals, not the run's
        if lost:
            raise LiveJobError(lost)
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
        thr, cpu, lag = s.thr, s.cpu, s.lag
        arrivals = s.arrivals.astype(np.int64)
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
        """Remove the run's containers, queues and Redis keys (also after an interrupt or a fault: a
        broker or Redis that is coming back is waited for, at most CLEANUP_WAIT_S each)."""
        import pika.exceptions
        import redis

        def containers():
            left = self.docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.prefix}"})
            for c in left:
                try:
                    c.remove(force=True)
                except Exception as exc:
                    if "No such container" not in str(exc) and "already in progress" not in str(exc):
                        raise
            if self.docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.prefix}"}):
                raise RuntimeError("containers of the run are still there")

        try:
            retry_until(containers, 30.0, time.monotonic, time.sleep, (Exception,), 1.0)
        except Exception as exc:
            log.warning("removing the containers of %s: %s", self.prefix, exc)
        if self.live.keep_broker_state:
            return

        def queue_delete(ch, name):
            ch.queue_delete(name)

        def exchange_delete(ch, name):
            ch.exchange_delete(name)

        def broker():
            conn = amqp_connect(self.live.amqp_url)
            try:
                deletes = [(queue_delete, q) for q in [entry_queue(self.prefix), dead_queue(self.prefix),
                                                        *(worker_queue(self.prefix, w) for w in range(self.top))]]
                for delete, name in [*deletes, (exchange_delete, key_exchange(self.prefix))]:
                    try:
                        delete(conn.channel(), name)
                    except pika.exceptions.ChannelClosedByBroker:
                        pass  # gone already (a broker restart takes transient queues with it)
            finally:
                if conn.is_open:
                    conn.close()

        def keys():
            client = self._redis_client()
            try:
                found = list(client.scan_iter(f"{self.prefix}:*", count=1000))
                if found:
                    client.delete(*found)
            finally:
                client.close()

        for what, fn, errors in (("broker", broker, (pika.exceptions.AMQPError, OSError)),
                                 ("Redis", keys, (redis.RedisError, OSError))):
            try:  # cleanup must not hide the run's own outcome
                retry_until(fn, self.CLEANUP_WAIT_S, time.monotonic, time.sleep, errors, 1.0)
            except Exception as exc:
                log.warning("could not remove the %s state of %s: %s", what, self.prefix, exc)
