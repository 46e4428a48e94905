"""Job mode on a real Apache Flink in reactive mode (`backend=flink`, docs/flink.md#job-mode-runs):
the same `daedalus`, `hpa` and `static_n` controllers as in the simulator and the container job
mode, deciding on the same `JobSnapshot`, with each worker one TaskManager of one slot.

* **Job.** Each workload runs on its own job (`backend.flink.jobs`: wc_sine on WordCount, ysb_avazu
  on YSB, tm_two_spike on Traffic Monitoring); its records are sentences, ad events or vehicle reports.
* **Workload.** The pattern's per-second rates, compressed in time as the live job mode does
  (`backend.flink.time_compression`), normalised so that the peak is job.peak_fraction x
  job.capacity_workers x the job's rate per TaskManager (`backend.flink.tm_rates`, else `tm_rate`)
  records/s, become the source's rate schedule; it ends (rate 0) after the run's duration, so that
  what is due can be drained and counted.
* **Measurements, every second** (`engine.read()`): arrivals = sentences the schedule made due,
  throughput per worker = words its counting subtask processed / words per sentence, CPU per worker
  = the counting task's busy fraction, lag = sentences due and not yet counted, latency = the mean
  of the words counted in that second (Δ latency sum / Δ words), uptime since the job last ran at
  the deployed parallelism; running = the parallelism the job runs at, not what was deployed.
* **Rescaling.** A controller's target adds TaskManagers or stops the newest ones (the settings'
  stop mode); reactive mode restarts the job from its last checkpoint at the new parallelism. The
  downtime is measured: from the action until the counting vertex runs at the new parallelism.
  Decisions taken while a change of the cluster is under way are not applied (as in the simulator).
* **Faults** (docs/flink.md#faults). Every reading, a TaskManager whose process exited, or which
  the JobManager dropped while its process runs (frozen or cut off: Flink's heartbeat timeout), is
  lost: it is killed if it still runs and replaced by a new one (as a Kubernetes Deployment
  replaces its pod), recorded as a `replace` action and in `details.recoveries`, at most
  `backend.flink.max_recoveries` times. A change (rescale or replacement) that does not bring the
  job to the deployed parallelism within `faults.change_bound_s` (from the starts this run
  measured) is given up (`details.given_up`); TaskManagers that never registered are replaced. A
  JobManager that exits or a job that fails for good ends the run early, incomplete.
* **Accounting.** After the run the source's schedule has ended; the run waits until everything due
  is counted (`drain_timeout_s`, longer while a replacement is under way) and, for the windowed jobs,
  until every window has fired: then scheduled = counted (the keyed state's total is exactly-once;
  YSB and Traffic Monitoring count what their filter let go beside what their windows admitted) and
  the window results stand for every record admitted, and replays are what the source emitted a second time
  after restarts (its emission ledger). A run whose drain did not finish or whose accounting does
  not balance is incomplete (`testbed.run_result.verdict`).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import numpy as np

from testbed.config import ExperimentConfig
from testbed.flink.cluster import FlinkCluster, FlinkClusterError
from testbed.flink.engine import ClusterEngine, Engine
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule, from_rates
from testbed.flink.settings import FlinkSettings, from_mapping
from testbed.job.engine import Clock, MonotonicClock
from testbed.job.ledger import JobLedger, Recovery
from testbed.job.loop import JobLoop, LoopSettings
from testbed.job.tables import job_tables
from testbed.job_config import PER_VERTEX
from testbed.live.flink_job_engine import FlinkJobEngine
from testbed.live.flink_vertex_engine import FlinkVertexEngine
from testbed.live.job_compression import compress_rates
from testbed.policies.contract import Policy
from testbed.run_result import RunResult, verdict

EngineFactory = Callable[[FlinkSettings, RateSchedule], Engine]
DRAIN_POLL_S = 0.5
# how a controller's decision reaches the job by default: one parallelism for every vertex, by
# TaskManagers of one slot added or stopped under reactive mode (backend.flink.parallelism=reactive);
# per-vertex mode is testbed/live/flink_vertex_engine.py
PARALLELISM_MODE = {"mode": "job", "scheduler": "reactive"}


def workload_rates(pattern: Any, duration_s: int, compression: float, peak_rate: float) -> np.ndarray:
    """Sentences/s per run second: the pattern's rates compressed by `compression`, held at their last
    value up to `duration_s`, scaled so that the peak is `peak_rate`."""
    raw = getattr(pattern, "rates", None)
    if raw is None:
        raise ValueError(f"job mode needs a workload with rates (items/s per second), got {type(pattern).__name__}")
    r = compress_rates(np.asarray(raw, dtype=float), compression)
    if len(r) < duration_s:
        r = np.concatenate([r, np.full(duration_s - len(r), r[-1] if len(r) else 0.0)])
    r = r[:duration_s]
    peak = float(r.max()) if len(r) else 0.0
    return r * (peak_rate / peak) if peak > 0 else r


def run_schedule(per_second: np.ndarray) -> RateSchedule:
    """The source's schedule: one rate per second, then 0 (the run's load ends with its duration)."""
    return from_rates([*np.round(per_second, 6).tolist(), 0.0])


@dataclass
class Accounting:
    """Sentences of the run, from the source's and the counter's metrics after the drain."""

    scheduled: float  # due by the schedule (all of it once the schedule has ended)
    emitted: float  # the source's position (after the last restart: from its checkpoint on)
    counted: float  # counted exactly once (WordCount: words / words per sentence)
    pending: float  # scheduled - counted: not counted when the drain ended
    replays: float  # emitted a second time after restarts (the source's emission ledger)
    drained: bool  # everything due was counted within the drain's bound
    job: str = "wordcount"
    # windowed jobs: records the windows admitted (counted less what the filter let go) and those
    # their results stood for (NaN for WordCount)
    admitted: float = math.nan
    windowed: float = math.nan

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def imbalances(self) -> Dict[str, float]:
        """What must be 0 once the drain finished: every sentence due emitted and counted exactly once."""
        gaps = {"counted - scheduled": round(self.counted - self.scheduled, 6),
                "emitted - scheduled": round(self.emitted - self.scheduled, 6)}
        if not math.isnan(self.windowed):
            gaps["windowed - admitted"] = round(self.windowed - self.admitted, 6)
        return gaps


class FlinkJobRun:
    """One job-mode run on Flink: the cluster as the job loop's engine (FlinkJobEngine), the loop,
    then the drain, the accounting and the tables."""

    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, run_id: str,
                 run_dir: Optional[Path] = None, engine: Optional[EngineFactory] = None,
                 clock: Optional[Clock] = None) -> None:
        self.cfg, self.job, self.flink = cfg, cfg.job, cfg.backend.flink
        self.policy = policy
        self.run_id = run_id
        self.run_dir = run_dir
        self.make_engine = engine or self._cluster
        self.clock = clock or MonotonicClock()
        # the workload's own job; its checkpoint interval is the config's (compressed with the run's other
        # times); per-vertex mode needs the adaptive scheduler (reactive mode refuses resource requirements)
        job = self.flink.job_for(cfg.pattern.name)
        self.per_vertex = self.flink.parallelism == PER_VERTEX
        self.settings: FlinkSettings = dataclasses.replace(
            from_mapping(self.flink.settings), job=job, checkpoint_s=float(cfg.job.checkpoint_s),
            scheduler="adaptive" if self.per_vertex else "reactive").validate()
        self.tm_rate = self.flink.rate_of(job)
        self.wps = self.settings.units  # counted units per source record
        self.duration = int(round(cfg.duration_min * 60.0))  # run seconds (the config is compressed already)
        self.top = self.job.max_scaleout
        self.peak_rate = self.job.peak_fraction * self.job.capacity_workers * self.tm_rate
        self.rates = workload_rates(pattern, self.duration, self.flink.time_compression, self.peak_rate)
        self.schedule = run_schedule(self.rates)
        self.ledger = JobLedger()
        self.t0 = self.clock.now()
        self.engine: Optional[Engine] = None
        self.job_engine: Optional[FlinkJobEngine] = None
        self.loop: Optional[JobLoop] = None

    def _cluster(self, settings: FlinkSettings, schedule: RateSchedule) -> Engine:
        work_dir = (self.run_dir / "flink") if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="flink-"))
        return ClusterEngine(FlinkCluster(settings, schedule, work_dir))

    def now(self) -> float:
        return self.clock.now() - (self.loop.t0 if self.loop is not None else self.t0)

    @property
    def slowest_start_s(self) -> float:
        return self.job_engine.slowest_start_s if self.job_engine is not None else 0.0

    @property
    def fault(self) -> Optional[str]:
        return self.loop.fault if self.loop is not None else None

    def _say(self, message: str) -> None:
        print(f"flink job {self.run_id}: {message}", file=sys.stderr, flush=True)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        engine = self.engine = self.make_engine(self.settings, self.schedule)
        try:
            try:
                first = self._start(engine)
            except FlinkClusterError as exc:  # the job never ran: nothing to measure, drain or count
                return self._not_started(engine, exc)
            self._loop(engine, first)
            accounting = self._drain() if self.fault is None else self._account(engine.read(), False)
            record = engine.record()
        finally:
            engine.close()
        assert self.loop is not None
        series, led = self.loop.series, self.ledger
        tables = self._tables()
        details = self._details(accounting, record)
        self._say(f"{len(series)} s, {len(led.rescales['t_s'])} rescale(s), {len(led.recoveries)} TaskManager(s) "
                  f"replaced, accounting {accounting.as_dict()}")
        return RunResult(tables, float(len(series)), details, incomplete=self._verdict(accounting))

    def _not_started(self, engine: Engine, exc: FlinkClusterError) -> RunResult:
        """A run whose job did not start (its application failed, a process exited, the start timed
        out): incomplete at once, with the cause in one line."""
        why = "the Flink job did not start: " + " ".join(str(exc).split())
        self._say(why)
        details = {"flink": engine.record(), "time_compression": self.flink.time_compression,
                   "parallelism": dict(PARALLELISM_MODE) if not self.per_vertex else {"mode": PER_VERTEX}}
        return RunResult({}, 0.0, details, incomplete=why)

    def _verdict(self, accounting: Accounting) -> Optional[str]:
        if self.fault is not None:
            return verdict(fault=self.fault)
        if not accounting.drained:
            return verdict(f"the drain did not finish within its bound: {accounting.pending:.0f} of "
                           f"{accounting.scheduled:.0f} sentences not counted")
        return verdict(imbalances=accounting.imbalances())

    def _start(self, engine: Engine) -> JobReading:
        """The JobManager and the initial TaskManagers; returns the first reading at that parallelism."""
        start = self.policy.initial_parallelism(self.top)
        n0 = int(start or self.job.initial_parallelism)
        kind = FlinkVertexEngine if self.per_vertex else FlinkJobEngine
        job_engine = self.job_engine = kind(engine, self.settings, self.tm_rate, self.top, self.ledger,
                                            self.clock, self.now)
        settings = LoopSettings(duration=self.duration, top=self.top, window_s=self.job.window_s,
                                checkpoint_s=self.job.checkpoint_s, max_recoveries=self.flink.max_recoveries,
                                recoveries_key="backend.flink.max_recoveries", noun="TaskManager",
                                per_vertex=self.per_vertex)
        self.loop = JobLoop(job_engine, self.policy, settings, self.clock, self.ledger, say=self._say)
        self.loop.start(n0)
        assert job_engine.cur is not None
        return job_engine.cur

    def _loop(self, engine: Engine, first: JobReading) -> None:
        """The job loop over the run's seconds (from the `first` reading at the initial parallelism)."""
        assert self.loop is not None
        self.loop.run()

    # -- the end -------------------------------------------------------------------------------
    def _drain(self) -> Accounting:
        """Waits until everything the schedule made due is counted: at most drain_timeout_s, or
        until a change under way (a replaced TaskManager) is done or given up, whichever is later.
        Faults are handled meanwhile as during the run."""
        loop, job_engine = self.loop, self.job_engine
        assert loop is not None and job_engine is not None
        total = float(self.schedule.total())
        deadline = self.now() + self.flink.drain_timeout_s
        reading = job_engine.read()
        while not self._done(reading, total):
            t = self.now()
            loop.check_faults(t)
            loop.settle(None)
            pending = self.ledger.pending
            if self.fault is not None or t >= max(deadline, pending.deadline if pending else 0.0):
                break
            self.clock.sleep(DRAIN_POLL_S)
            reading = job_engine.read()
        return self._account(reading, self._done(reading, total))

    def _done(self, reading: JobReading, total: float) -> bool:
        """Everything due counted and, for a windowed job, every window fired."""
        counted = _counted_all(reading, total, self.wps)
        return counted and (not self.settings.spec.windows or reading.windowed() >= reading.admitted())

    def _account(self, reading: JobReading, drained: bool) -> Accounting:
        src = reading.source
        counted = reading.counted() / self.wps
        scheduled = src.scheduled if src is not None else float(self.schedule.total())
        windows = self.settings.spec.windows
        return Accounting(scheduled=scheduled, emitted=src.emitted if src is not None else math.nan,
                          counted=counted, pending=scheduled - counted, replays=self.ledger.replayed,
                          drained=drained, job=self.settings.job,
                          admitted=reading.admitted() if windows else math.nan,
                          windowed=reading.windowed() if windows else math.nan)

    def _tables(self) -> Dict[str, Dict[str, list]]:
        assert self.loop is not None and self.job_engine is not None
        s, led = self.loop.series, self.ledger
        return job_tables(int(round(self.cfg.runtime.monitoring_s)), s.arrivals, s.thr, s.cpu, s.lag, s.parallel,
                          s.running, self.job_engine.lat_t, self.job_engine.lat_ms, led.records, self.policy,
                          led.rescales)

    def _details(self, accounting: Accounting, record: Dict[str, Any]) -> Dict[str, Any]:
        capacity = {str(n): n * self.tm_rate for n in range(1, self.top + 1)}
        details: Dict[str, Any] = {
            "job": {"mu": self.tm_rate, "capacity": capacity, "peak_rate": self.peak_rate,
                    "items": accounting.scheduled, "unprocessed_at_end": accounting.pending, "flink": True,
                    "flink_job": self.settings.job, "record": self.settings.spec.record},
            "accounting": accounting.as_dict(), "flink": record,
            "recoveries": [_recovery(r) for r in self.ledger.recoveries], "given_up": self.ledger.given_up,
            "time_compression": self.flink.time_compression, "parallelism": self._mode()}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details


    def _mode(self) -> Dict[str, Any]:
        """details.parallelism: reactive (one parallelism), or per vertex with what each ran at."""
        engine = self.job_engine
        return engine.mode_record() if isinstance(engine, FlinkVertexEngine) else dict(PARALLELISM_MODE)


def _recovery(r: Recovery) -> Dict[str, Any]:
    """A row of details.recoveries: the worker is a TaskManager."""
    return {"t_s": r.t_s, "taskmanager": r.worker, "why": r.why, "replaced_by": r.replaced_by,
            "downtime_s": r.downtime_s, "replayed": r.replayed}


def _counted_all(reading: JobReading, total: float, wps: int) -> bool:
    return reading.source is not None and reading.counted() >= total * wps
