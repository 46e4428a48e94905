"""Job mode on the live testbed (docs/papers/daedalus.md#live-runtime): the Daedalus paper's keyed
job, scaled down to one machine, driven by the same controllers as the job simulator
(testbed/sim/job.py) on the same job loop (testbed/job/loop.py) and writing the same event-log
tables. The worker containers are the loop's engine (testbed/live/docker_job_engine.py); this
runner plans the run, builds the engine and the loop, and accounts for every item at the end.

* **Workers** are containers of the image `backend.live.job.image` (operators/keyed_worker.py), one
  per worker, each with a CPU quota (`cpus`); each burns CPU per item and keeps per-key counts,
  committed with its checkpoint (testbed/live/job_workers.py).
* **Keys:** items enter the entry queue (the source backlog) with a key drawn from the job's key
  distribution (`job.keys`, `job.key_distribution`); the router (testbed/live/job_flow.py) forwards
  them to RabbitMQ's consistent-hash exchange, which sends each key to one of the n bound worker
  queues (testbed/live/job_broker.py). Before the run, one probe item per key and scale-out
  measures where the exchange sends every key, which gives the shares s_w and the nominal capacity
  C(n) = worker_rate / max s_w.
* **Rates:** the workload, compressed in time (testbed/live/job_compression.py), is scaled so that
  its peak is `job.peak_fraction` x C(`job.capacity_workers`), as in the simulator.
* **Rescale = stop the world** from the workers' checkpoints, after the drawn downtime
  (`job.downtime_*_s`, at least what it took): the engine's module says how. Items processed again
  after a restart count once in the state and in latency (their checkpoint commits them once).
  Decisions that fell due while a restart blocked are skipped; the next is taken on the latest row.
* **Measurements, per second** (testbed/live/job_sampler.py): arrivals, each worker's processed
  items and CPU, the lag. The controllers see the same `JobSnapshot` as in the simulator, every
  `policy.interval_s` seconds.
* **Accounting** at the end (after every worker's final checkpoint): emitted = committed + still
  queued (entry, worker queues) + dead-lettered; processed - committed = items processed again
  (the replays); the keyed state's total = committed.

* **Faults** (docs/papers/daedalus.md#faults-during-a-live-job-run): a worker container that exits
  (killed, crashed) is a lost worker of the loop: it is replaced and the job restarts from its
  checkpoints at the same parallelism (a stop-the-world without a drawn downtime; what it processed
  since its checkpoint is replayed; ids its last checkpoint committed but did not acknowledge are
  dropped from the queues), at most `backend.live.job.max_recoveries` times. A lost RabbitMQ
  connection (a broker restart takes the job's transient queues and their items with it) and a
  Redis that restarted, lost the run's keys or stayed away end the run with `LiveJobError`: one
  line naming the service and the time (testbed/live/job_faults.py). A worker that exits during a
  restart's stop or start is replaced within that restart, under the same budget; one that exits
  once the job runs again is left to the loop. Every wait has a bound (start and stop timeouts,
  30 s without a measurement, the broker's wait, the clean-up's wait).

Whatever ends the run, `finally` removes its containers, queues and Redis keys (waiting, bounded,
for a broker or Redis that is coming back); the caller marks the manifest incomplete with the
`LiveJobError`'s one-line reason.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from operators.keyed_job import redis_key
from testbed.config import ExperimentConfig
from testbed.job.engine import Clock, MonotonicClock
from testbed.job.ledger import JobLedger, Recovery
from testbed.job.loop import JobLoop, LoopSettings
from testbed.job.tables import job_tables
from testbed.live.docker_job_engine import DockerJobEngine, DockerParts, Feed
from testbed.live.engines import RUN_LABEL, EngineError, connect, missing_images, reap_orphans
from testbed.live.job_broker import Broker
from testbed.live.job_compression import compress_rates
from testbed.live.job_faults import FaultWatch, LiveJobError, redis_client
from testbed.live.job_flow import ItemSource, Router
from testbed.live.job_routing import InflightGate, capacity, inflight_limit, key_names, retry_until, worker_shares
from testbed.live.job_sampler import Sampler
from testbed.live.job_workers import Workers
from testbed.live.run import run_prefix
from testbed.policies.contract import Policy
from testbed.rng import stream
from testbed.run_result import RunResult, verdict
from testbed.sim.job import key_weights

log = logging.getLogger(__name__)

__all__ = ["JobAccounting", "LiveJobError", "LiveJobRun"]


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

    def imbalances(self) -> Dict[str, float]:
        return {"missing items": self.missing, "keyed state - committed": self.state_total - self.committed}


class LiveJobRun:
    CLEANUP_WAIT_S = 60.0  # the clean-up waits this long for a broker or Redis that is coming back

    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, seed: int, run_id: str,
                 run_dir: Optional[Path] = None, clock: Optional[Clock] = None) -> None:
        self.cfg, self.job, self.live, self.settings = cfg, cfg.job, cfg.backend.live, cfg.backend.live.job
        self.policy, self.seed, self.run_id, self.run_dir = policy, seed, run_id, run_dir
        self.clock = clock or MonotonicClock()
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
        self.broker = Broker(self.live.amqp_url, self.prefix, self.top)
        self.ledger = JobLedger()
        self.capacity: Dict[int, float] = {}
        self.arrivals_plan: np.ndarray = np.zeros(0, dtype=int)
        self.engine: Optional[DockerJobEngine] = None
        self.orphans_removed: List[str] = []  # containers of killed runs removed at the start
        self.loop: Optional[JobLoop] = None

    def now(self) -> float:
        return self.engine.now() if self.engine is not None else 0.0

    def _say(self, message: str) -> None:
        print(f"live job {self.run_id}: {message}", file=sys.stderr, flush=True)

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        import pika.exceptions
        import redis

        self._connect_engine()
        self.redis = redis_client(self.live.redis_url)
        self.faults = FaultWatch(self.live.amqp_url, self.redis, self.prefix, self.now)
        try:
            self.faults.remember_redis()
            self.broker.declare()
            shares, target_peak = self._plan_arrivals()
            loop = self._build()
            start = self.policy.initial_parallelism(self.top)
            loop.start(int(start or self.job.initial_parallelism))
            loop.run()
            if loop.fault is not None:
                raise LiveJobError(loop.fault)
            loop.settle(None)
            return self._finish(shares, target_peak)
        except (redis.RedisError, pika.exceptions.AMQPError, LiveJobError) as exc:
            # the reason goes to the manifest: one line naming what failed and when
            reason = exc if isinstance(exc, LiveJobError) else LiveJobError(self.faults.reason(exc, "the runtime"))
            print(f"live job {self.run_id} [prefix {self.prefix}]: incomplete: {reason}", file=sys.stderr, flush=True)
            if reason is exc:
                raise
            raise reason from exc
        finally:
            self._stop_parts()

    def _connect_engine(self) -> None:
        engine_url = self.live.engines[0].url
        self.docker = connect(engine_url)
        self.orphans_removed = reap_orphans(self.docker)  # containers of a killed run on this machine
        missing = missing_images(self.docker, [self.settings.image])
        if missing:
            raise EngineError(engine_url, f"image {missing[0]} missing: build it with `bash infra/images.sh` "
                                          f"(or `make images`)")

    def _plan_arrivals(self) -> Tuple[Dict[int, List[float]], float]:
        """Capacities from the measured key ownership, and the arrivals per second scaled so that the
        workload's peak is peak_fraction of capacity_workers' capacity: (shares per parallelism, peak rate)."""
        owners = self.broker.probe(self.keys)
        shares = {n: worker_shares(owners[n], dict(zip(self.keys, self.weights, strict=True)), n) for n in owners}
        self.capacity = {n: capacity(self.settings.worker_rate, s) for n, s in shares.items()}
        peak = float(self.pattern_rates.max()) if len(self.pattern_rates) else 0.0
        target_peak = self.job.peak_fraction * self.capacity[min(self.job.capacity_workers, self.top)]
        rates = self.pattern_rates * (target_peak / peak if peak > 0 else 0.0)
        cum = np.floor(np.cumsum(rates))
        self.arrivals_plan = np.diff(np.concatenate([[0.0], cum])).astype(int)
        return shares, target_peak

    def _build(self) -> JobLoop:
        """The worker containers as the loop's engine, and the loop."""
        workers = Workers(self.docker, self.prefix, self.settings, self._worker_env, self.live.network_mode)
        parts = DockerParts(workers, self.broker, self.redis, self.faults, self.clock, self._launch)
        engine = self.engine = DockerJobEngine(parts, self.settings, self.job, self.ledger, self.capacity,
                                               stream(self.seed, "job/downtime"), self._say)
        self.faults.committed = engine.committed_total
        settings = LoopSettings(duration=self.duration, top=self.top, window_s=self.job.window_s,
                                checkpoint_s=self.job.checkpoint_s, max_recoveries=self.settings.max_recoveries,
                                recoveries_key="backend.live.job.max_recoveries", skip_missed_decisions=True)
        self.loop = JobLoop(engine, self.policy, settings, self.clock, self.ledger, say=self._say)
        return self.loop

    def _launch(self, n: int, t0: float) -> Feed:
        """The router, the source and the sampler of a job of n workers, from run time 0 at `t0`."""
        assert self.engine is not None
        gate = InflightGate(inflight_limit(self.settings.inflight_s, self.settings.worker_rate, n))
        router = Router(self.live.amqp_url, self.prefix, gate, self.engine.processed_total)
        source = ItemSource(self.live.amqp_url, self.prefix, self.arrivals_plan, self.keys, self.weights,
                            stream(self.seed, "job/keys-drawn"))
        sampler = Sampler(self.live.amqp_url, self.live.redis_url, self.prefix, self.top, self.settings.cpus,
                          source, router, self.arrivals_plan, self.engine.job_state, self.faults, t0)
        feed = Feed(source, router, sampler)
        self.faults.emitted = lambda: source.emitted
        router.start()
        source.start(t0)
        sampler.start()
        return feed

    def _worker_env(self, w: int) -> Dict[str, str]:
        s = self.settings
        return {"RUN_PREFIX": self.prefix, "WORKER": str(w), "AMQP_URL": self.live.amqp_url,
                "REDIS_URL": self.live.redis_url, "BURN_MS": str(s.burn_ms), "PREFETCH": str(s.prefetch),
                "CHECKPOINT_S": str(self.job.checkpoint_s), "LATENCY_EVERY": str(s.latency_every)}

    # -- the end -------------------------------------------------------------------------------------
    def _finish(self, shares: Dict[int, List[float]], target_peak: float) -> RunResult:
        """The source stopped, the router paused, the sampler stopped: account, and build the tables."""
        assert self.engine is not None and self.engine.feed is not None and self.loop is not None
        feed = self.engine.feed
        source, router = feed.source, feed.router
        source.stop()
        end = self.now()
        if not router.pause(self.settings.stop_timeout_s):
            self.faults.check()
            raise LiveJobError(f"the router did not pause at the end of the run (t={self.now():.0f} s)")
        feed.sampler.stop(DockerJobEngine.STALL_S)
        self.faults.check()
        accounting = self._final()
        series = self.loop.series  # what was published, for the tables
        series.arrivals[:] = [source.per_second[k] if k < len(source.per_second) else 0 for k in range(len(series))]
        tables = self._tables(source.t0_wall or time.time())
        self.faults.check_redis()  # the tables read Redis too (latencies): still the run's state?
        details = self._details(accounting, shares, target_peak)
        self._say(f"{end:.0f} s, {len(self.ledger.rescales['t_s'])} rescale(s), {len(self.ledger.recoveries)} "
                  f"worker(s) replaced, accounting {accounting.as_dict()}")
        return RunResult(tables, float(len(series)), details, incomplete=verdict(imbalances=accounting.imbalances()))

    def _final(self) -> JobAccounting:
        """Every worker commits its last checkpoint and stops; then every item is accounted for."""
        engine = self.engine
        assert engine is not None and engine.feed is not None
        feed = engine.feed
        self.redis.set(redis_key(self.prefix, "control"), f"final:{engine.epoch}")
        engine.wait(range(engine.n), f"final:{engine.epoch}", self.settings.stop_timeout_s, "the final checkpoint")
        feed.router.stop()  # its connection closes: what it held goes back to the entry queue
        entry, workers, dead = self.broker.settled_depths(self.settings.stop_timeout_s, self.clock)
        self.faults.check_redis()  # the counts below would be wrong totals, not the run's
        committed, processed = engine.committed_total(), engine.processed_total()
        state = sum(int(v) for v in self.redis.hvals(redis_key(self.prefix, "state")))
        emitted = feed.source.emitted
        return JobAccounting(emitted=emitted, committed=committed, processed=processed,
                             replayed=processed - committed, queued_entry=entry, queued_workers=workers,
                             dead_lettered=dead, state_total=state,
                             missing=emitted - committed - entry - workers - dead)

    def _latency(self, t0_wall: float) -> Tuple[List[float], List[float]]:
        raw = self.redis.lrange(redis_key(self.prefix, "latency"), 0, -1)
        t, ms = [], []
        for r in raw:
            done, lat = r.decode().split(",")
            t.append(int(done) / 1000.0 - t0_wall)
            ms.append(float(lat))
        order = np.argsort(t)
        return [t[i] for i in order], [ms[i] for i in order]

    def _tables(self, t0_wall: float) -> Dict[str, Dict[str, list]]:
        assert self.loop is not None
        s, led = self.loop.series, self.ledger
        lat_t, lat_ms = self._latency(t0_wall)
        return job_tables(max(1, int(round(self.cfg.runtime.monitoring_s))), s.arrivals.astype(np.int64), s.thr,
                          s.cpu, s.lag, s.parallel, s.running, lat_t, lat_ms, led.records, self.policy, led.rescales)

    def _details(self, accounting: JobAccounting, shares: Dict[int, List[float]],
                 target_peak: float) -> Dict[str, Any]:
        assert self.engine is not None
        details: Dict[str, Any] = {
            "job": {"mu": self.settings.worker_rate, "capacity": {str(n): c for n, c in self.capacity.items()},
                    "shares": {str(n): s for n, s in shares.items()}, "peak_rate": target_peak,
                    "items": accounting.emitted, "unprocessed_at_end": accounting.queued_entry
                    + accounting.queued_workers, "measured_worker_rate": self._measured_rate(), "live": True},
            "prefix": self.prefix, "accounting": accounting.as_dict(), "instances": self.engine.workers.log,
            "recoveries": [_recovery(r) for r in self.ledger.recoveries], "given_up": self.ledger.given_up,
            "time_compression": self.settings.time_compression, "orphans_removed": self.orphans_removed}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details

    def _measured_rate(self) -> float:
        """Items/s of a worker at its whole quota, from the worker-seconds above 90 % CPU."""
        assert self.loop is not None
        thr, cpu = np.array(self.loop.series.thr), np.array(self.loop.series.cpu)
        if not thr.size:
            return math.nan
        busy = np.isfinite(cpu) & (cpu >= 0.9)
        return float((thr[busy] / cpu[busy]).mean()) if busy.any() else math.nan

    # -- clean-up ------------------------------------------------------------------------------------
    def _stop_parts(self) -> None:
        """Whatever happened: the sampler, the source and the router stopped, the run's containers and names gone."""
        if self.engine is not None:
            self.engine.stop()
        self._cleanup()

    def _cleanup(self) -> None:
        """Remove the run's containers, queues and Redis keys (also after an interrupt or a fault: a
        broker or Redis that is coming back is waited for, at most CLEANUP_WAIT_S each)."""
        import pika.exceptions
        import redis

        try:
            retry_until(self._remove_containers, 30.0, time.monotonic, time.sleep, (Exception,), 1.0)
        except Exception as exc:
            log.warning("removing the containers of %s: %s", self.prefix, exc)
        if self.live.keep_broker_state:
            return
        for what, fn, errors in (("broker", self.broker.delete, (pika.exceptions.AMQPError, OSError)),
                                 ("Redis", self._delete_keys, (redis.RedisError, OSError))):
            try:  # cleanup must not hide the run's own outcome
                retry_until(fn, self.CLEANUP_WAIT_S, time.monotonic, time.sleep, errors, 1.0)
            except Exception as exc:
                log.warning("could not remove the %s state of %s: %s", what, self.prefix, exc)

    def _remove_containers(self) -> None:
        label = {"label": f"{RUN_LABEL}={self.prefix}"}
        for c in self.docker.containers.list(all=True, filters=label):
            try:
                c.remove(force=True)
            except Exception as exc:
                if "No such container" not in str(exc) and "already in progress" not in str(exc):
                    raise
        if self.docker.containers.list(all=True, filters=label):
            raise RuntimeError("containers of the run are still there")

    def _delete_keys(self) -> None:
        client = redis_client(self.live.redis_url)
        try:
            found = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            if found:
                client.delete(*found)
        finally:
            client.close()


def _recovery(r: Recovery) -> Dict[str, Any]:
    """A row of details.recoveries: the worker, what happened to its container, the restart's figures."""
    return {"t_s": r.t_s, "worker": r.worker, "why": r.why, "replaced_by": r.replaced_by,
            "downtime_s": r.downtime_s, "replayed": r.replayed, **r.details}
