"""Job mode on a real Apache Flink in reactive mode (`backend=flink`, docs/flink.md#job-mode-runs):
the same `daedalus`, `hpa` and `static_n` controllers as in the simulator and the container job
mode, deciding on the same `JobSnapshot`, with each worker one TaskManager of one slot.

* **Workload.** The pattern's per-second rates, compressed in time as the live job mode does
  (`backend.flink.time_compression`), normalised so that the peak is job.peak_fraction x
  job.capacity_workers x `backend.flink.tm_rate` sentences/s, become the source's rate schedule; it
  ends (rate 0) after the run's duration, so that what is due can be drained and counted.
* **Measurements, every second** (`cluster.read()`): arrivals = sentences the schedule made due,
  throughput per worker = words its counting subtask processed / words per sentence, CPU per worker
  = the counting task's busy fraction, lag = sentences due and not yet counted, latency = the mean
  of the words counted in that second (Δ latency sum / Δ words), uptime since the job last ran at
  the deployed parallelism.
* **Rescaling.** A controller's target adds TaskManagers or stops the newest ones (the settings'
  stop mode); reactive mode restarts the job from its last checkpoint at the new parallelism. The
  downtime is measured: from the action until the counting vertex runs at the new parallelism.
  Decisions taken while a rescale is still under way are not applied (as in the simulator).
* **Accounting.** After the run the source's schedule has ended; the run waits until everything due
  is counted (`drain_timeout_s`): then scheduled = counted, and nothing was counted twice (the keyed
  state's total is exactly-once). Processed − counted = the replays after restarts (at least: the
  readings miss an attempt's last words before a restart).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from testbed.actions import ActionRecord
from testbed.config import ExperimentConfig
from testbed.flink.cluster import FlinkCluster
from testbed.flink.metrics import JobReading, rates
from testbed.flink.schedule import RateSchedule, from_rates
from testbed.flink.settings import FlinkSettings, from_mapping
from testbed.job_tables import job_tables, new_rescales
from testbed.live.job_compression import compress_rates
from testbed.model import ScaleDown
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.scaling import job_rescale
from testbed.run_result import RunResult


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
    emitted: float  # emitted by the source (its position after the last restart)
    counted: float  # counted in the keyed state (words / words per sentence)
    pending: float  # scheduled - counted: not counted when the drain ended
    # processed by the task attempts as far as readings saw them (a replay is processed again); a lower
    # bound: an attempt's last words before a restart, after its last reading, are not seen
    processed: float
    replays: float  # processed - counted, at least (0 when the readings saw fewer than were counted)
    drained: bool  # everything due was counted within drain_timeout_s

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class _Series:
    """The per-second measurements (row k: run second k, ending at k + 1)."""

    arrivals: List[float] = field(default_factory=list)
    thr: List[np.ndarray] = field(default_factory=list)
    cpu: List[np.ndarray] = field(default_factory=list)
    lag: List[float] = field(default_factory=list)
    uptime: List[float] = field(default_factory=list)
    parallel: List[int] = field(default_factory=list)
    running: List[int] = field(default_factory=list)
    lat_t: List[float] = field(default_factory=list)
    lat_ms: List[float] = field(default_factory=list)


@dataclass
class _Rescale:
    index: int  # its row in the rescales table
    target: int
    t_s: float
    replays_before: float  # sentences processed more than once before the rescale began


class FlinkJobRun:
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, run_id: str,
                 run_dir: Optional[Path] = None) -> None:
        self.cfg, self.job, self.flink = cfg, cfg.job, cfg.backend.flink
        self.policy = policy
        self.run_id = run_id
        self.run_dir = run_dir
        # the job's checkpoint interval is the config's (compressed with the run's other times)
        self.settings: FlinkSettings = dataclasses.replace(from_mapping(self.flink.settings),
                                                           checkpoint_s=float(cfg.job.checkpoint_s))
        self.wps = self.settings.words_per_sentence
        self.duration = int(round(cfg.duration_min * 60.0))  # run seconds (the config is compressed already)
        self.top = self.job.max_scaleout
        self.peak_rate = self.job.peak_fraction * self.job.capacity_workers * self.flink.tm_rate
        self.rates = workload_rates(pattern, self.duration, self.flink.time_compression, self.peak_rate)
        self.schedule = run_schedule(self.rates)
        self.series = _Series()
        self.records: List[ActionRecord] = []
        self.rescales: Dict[str, list] = new_rescales()
        self.pending: Optional[_Rescale] = None
        self.recovering: Optional[int] = None  # a rescale whose lag has not come back yet
        self.ready_from: Dict[int, float] = {}
        self.n = 0
        self.up_since = 0.0
        self.processed: Dict[str, float] = {}  # words per task attempt, the most seen
        self.cluster: Optional[FlinkCluster] = None
        self.replays = 0.0  # sentences processed more than once so far (processed - counted)

    @property
    def workers(self) -> List[str]:
        """Worker w is the w-th TaskManager started and not stopped (the newest are stopped first)."""
        return list(self.cluster.taskmanagers) if self.cluster is not None else []

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        work_dir = (self.run_dir / "flink") if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="flink-"))
        with FlinkCluster(self.settings, self.schedule, work_dir) as cluster:
            self.cluster = cluster
            first = self._start(cluster)
            self._loop(cluster, first)
            accounting = self._drain(cluster)
            record = cluster.record()
            record["memory_mb"] = _memory_mb(cluster)
        tables = self._tables()
        details = self._details(accounting, record)
        print(f"flink job {self.run_id}: {self.duration} s, {len(self.rescales['t_s'])} rescale(s), "
              f"accounting {accounting.as_dict()}", file=sys.stderr, flush=True)
        return RunResult(tables, float(self.duration), details)

    def _start(self, cluster: FlinkCluster) -> JobReading:
        """The JobManager and the initial TaskManagers; returns the first reading at that parallelism."""
        start = self.policy.initial_parallelism(self.top)
        n0 = int(start or self.job.initial_parallelism)
        cluster.start()
        for _ in range(n0):
            cluster.add_taskmanager()
        first = cluster.wait_until(lambda r: _runs_at(r, n0) and r.source is not None,
                                   f"the job runs at parallelism {n0}")
        self.n = n0
        self.ready_from = {w: 0.0 for w in range(n0)}
        self.t0 = time.monotonic()
        return first

    def _loop(self, cluster: FlinkCluster, first: JobReading) -> None:
        interval = self.policy.interval_s
        next_decision = float(interval) if interval else math.inf
        prev = first
        for k in range(self.duration):
            delay = self.t0 + (k + 1) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            cur = cluster.read()
            self._row(k, prev, cur)
            self._track_rescale(k, cur)
            prev = cur
            if k + 1 >= next_decision - 1e-9 and k + 1 < self.duration:
                assert interval  # next_decision is finite only with an interval
                next_decision += interval
                self._decide(cluster, k)

    # -- measurements --------------------------------------------------------------------------
    def _row(self, k: int, prev: JobReading, cur: JobReading) -> None:
        s, r = self.series, rates(prev, cur)
        names = self.workers[:self.n]
        thr = np.zeros(self.top)
        cpu = np.full(self.top, np.nan)
        for w, name in enumerate(names):
            thr[w] = r.throughput.get(name, 0.0) * r.dt / self.wps
            if name in r.busy:
                cpu[w] = r.busy[name]
        src0, src1 = prev.source, cur.source
        s.arrivals.append(src1.scheduled - src0.scheduled if src0 is not None and src1 is not None else 0.0)
        s.thr.append(thr)
        s.cpu.append(cpu)
        backlog = cur.backlog(self.wps)
        s.lag.append(backlog if math.isfinite(backlog) else (s.lag[-1] if s.lag else 0.0))
        running = _runs_at(cur, self.n)
        if running and (not s.running or s.running[-1] == 0):
            self.up_since = float(k)
        s.running.append(self.n if running else 0)
        s.parallel.append(self.n)
        s.uptime.append(k + 1.0 - self.up_since if running else 0.0)
        self._latency(k, prev, cur)
        self._note_attempts(cur)
        if cur.subtask_count() == self.n and cur.status == "RUNNING":  # every subtask read: the total is whole
            self.replays = max(self.replays, (sum(self.processed.values()) - cur.counted()) / self.wps)

    def _note_attempts(self, reading: JobReading) -> None:
        """Words processed per task attempt: the most any reading saw."""
        for attempt, words in reading.attempts().items():
            self.processed[attempt] = max(words, self.processed.get(attempt, 0.0))

    def _latency(self, k: int, prev: JobReading, cur: JobReading) -> None:
        """The mean latency of the words counted in second k (same task attempts in both readings)."""
        before = {st.attempt: st for tm in prev.taskmanagers for st in tm.subtasks}
        words = total = 0.0
        for tm in cur.taskmanagers:
            for st in tm.subtasks:
                old = before.get(st.attempt)
                if old is not None and st.records_in > old.records_in:
                    words += st.records_in - old.records_in
                    total += st.latency_sum_ms - old.latency_sum_ms
        if words > 0:
            self.series.lat_t.append(k + 1.0)
            self.series.lat_ms.append(total / words)

    # -- rescaling -----------------------------------------------------------------------------
    def _decide(self, cluster: FlinkCluster, k: int) -> None:
        rescale = job_rescale(self.n, self.policy.decide_job(self._snapshot(k)), self.top)
        if rescale is None or self.pending is not None:
            return  # no change, or the job is still restarting from the previous one
        target, actions = rescale
        now = float(k + 1)
        for a in actions:
            inst = a.instance if isinstance(a, ScaleDown) else None
            self.records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
        self._rescale(cluster, k, target)

    def _rescale(self, cluster: FlinkCluster, k: int, target: int) -> None:
        n, now = self.n, float(k + 1)
        how = "started" if target > n else f"stopped ({self.settings.stop_mode})"
        self.records.append(ActionRecord(now, "restart", JOB_OPERATOR, None, None, None,
                                         f"reactive rescale {n} -> {target} TaskManagers: {abs(target - n)} "
                                         f"{how}; the job restarts from its last checkpoint"))
        for key, value in (("t_s", now), ("from_n", n), ("to_n", target), ("downtime_s", math.nan),
                           ("replayed", 0), ("lag_before", float(self.series.lag[k])),
                           ("recovered_s", math.nan), ("capacity_before", n * self.flink.tm_rate),
                           ("capacity_after", target * self.flink.tm_rate)):
            self.rescales[key].append(value)
        for _ in range(n, target):
            cluster.add_taskmanager()
        for _ in range(target, n):
            cluster.stop_taskmanager()
        for w in range(n, target):
            self.ready_from[w] = math.inf  # until the job runs at the new parallelism
        for w in range(target, n):
            self.ready_from.pop(w, None)
        self.n = target
        self.pending = _Rescale(len(self.rescales["t_s"]) - 1, target, now, self.replays)

    def _track_rescale(self, k: int, cur: JobReading) -> None:
        """Ends a rescale's downtime once the job runs at its target; then waits for its lag to recover."""
        t = float(k + 1)
        p = self.pending
        if p is not None and _runs_at(cur, p.target):
            self.rescales["downtime_s"][p.index] = t - p.t_s
            # what the restart processed again (at least: an old attempt's last words may be unseen)
            self.rescales["replayed"][p.index] = int(round(max(0.0, self.replays - p.replays_before)))
            for w in range(p.target):
                self.ready_from[w] = min(self.ready_from.get(w, t), t)
            self.pending, self.recovering = None, p.index
        i = self.recovering
        if i is not None and self.pending is None and self.series.running[-1] > 0 \
                and self.series.lag[-1] <= max(self.rescales["lag_before"][i], self.series.arrivals[-1]):
            self.rescales["recovered_s"][i] = t - self.rescales["t_s"][i]
            self.recovering = None

    def _snapshot(self, k: int) -> JobSnapshot:
        s = self.series
        lo = max(0, k + 1 - self.job.window_s)
        sl = slice(lo, k + 1)
        thr, cpu = np.array(s.thr[sl]), np.array(s.cpu[sl])
        names = {f"w{w}": w for w in range(self.n)}
        return JobSnapshot(
            t=float(k + 1), parallelism=self.n, max_scaleout=self.top, checkpoint_s=self.job.checkpoint_s,
            lag=float(s.lag[k]), seconds=np.arange(lo + 1, k + 2, dtype=float),
            workload=np.array(s.arrivals[sl], dtype=float),
            throughput={name: thr[:, w].copy() for name, w in names.items()},
            cpu={name: cpu[:, w].copy() for name, w in names.items()}, uptime=np.array(s.uptime[sl], dtype=float),
            ready={name: self.ready_from.get(w, 0.0) <= k + 1 for name, w in names.items()})

    # -- the end -------------------------------------------------------------------------------
    def _drain(self, cluster: FlinkCluster) -> Accounting:
        """Waits until everything the schedule made due is counted (or the drain times out)."""
        total = float(self.schedule.total())
        deadline = time.monotonic() + self.flink.drain_timeout_s
        reading = cluster.read()
        while not _counted_all(reading, total, self.wps) and time.monotonic() < deadline:
            time.sleep(0.5)
            reading = cluster.read()
            self._note_attempts(reading)
        src = reading.source
        counted = reading.counted() / self.wps
        processed = sum(self.processed.values()) / self.wps
        return Accounting(scheduled=src.scheduled if src is not None else math.nan,
                          emitted=src.emitted if src is not None else math.nan, counted=counted,
                          pending=(src.scheduled if src is not None else total) - counted, processed=processed,
                          replays=max(0.0, processed - counted), drained=_counted_all(reading, total, self.wps))

    def _tables(self) -> Dict[str, Dict[str, list]]:
        s = self.series
        return job_tables(int(round(self.cfg.runtime.monitoring_s)), np.array(s.arrivals), np.array(s.thr),
                          np.array(s.cpu), np.array(s.lag), s.parallel, s.running, s.lat_t, s.lat_ms,
                          self.records, self.policy, self.rescales)

    def _details(self, accounting: Accounting, record: Dict[str, Any]) -> Dict[str, Any]:
        capacity = {str(n): n * self.flink.tm_rate for n in range(1, self.top + 1)}
        details: Dict[str, Any] = {
            "job": {"mu": self.flink.tm_rate, "capacity": capacity, "peak_rate": self.peak_rate,
                    "items": accounting.scheduled, "unprocessed_at_end": accounting.pending, "flink": True},
            "accounting": accounting.as_dict(), "flink": record,
            "time_compression": self.flink.time_compression}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details


def _runs_at(reading: JobReading, n: int) -> bool:
    return reading.status == "RUNNING" and reading.parallelism == n


def _counted_all(reading: JobReading, total: float, wps: int) -> bool:
    return reading.source is not None and reading.counted() >= total * wps


def _memory_mb(cluster: FlinkCluster) -> Dict[str, float]:
    """Resident memory per process at the run's end."""
    procs = [p for p in (cluster.jobmanager, *cluster.taskmanagers.values()) if p is not None]
    return {p.name: mb for p in procs if (mb := p.rss_mb()) is not None}
