"""Job mode on a real Apache Flink in reactive mode (`backend=flink`, docs/flink.md#job-mode-runs):
the same `daedalus`, `hpa` and `static_n` controllers as in the simulator and the container job
mode, deciding on the same `JobSnapshot`, with each worker one TaskManager of one slot.

* **Workload.** The pattern's per-second rates, compressed in time as the live job mode does
  (`backend.flink.time_compression`), normalised so that the peak is job.peak_fraction x
  job.capacity_workers x `backend.flink.tm_rate` sentences/s, become the source's rate schedule; it
  ends (rate 0) after the run's duration, so that what is due can be drained and counted.
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
  is counted (`drain_timeout_s`, longer while a replacement is under way): then scheduled = counted
  (the keyed state's total is exactly-once), and replays are what the source emitted a second time
  after restarts (its emission ledger). A run whose drain did not finish or whose accounting does
  not balance is incomplete (`testbed.run_result.verdict`).
"""
from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set

import numpy as np

from testbed.actions import ActionRecord
from testbed.config import ExperimentConfig
from testbed.flink.cluster import FlinkCluster, FlinkClusterError
from testbed.flink.engine import JOBMANAGER, Clock, ClusterEngine, Engine, MonotonicClock
from testbed.flink.faults import TERMINAL_STATES, Loss, change_bound_s, exit_status, find_losses, unregistered
from testbed.flink.metrics import JobReading, rates
from testbed.flink.schedule import RateSchedule, from_rates
from testbed.flink.settings import FlinkSettings, from_mapping
from testbed.job.tables import job_tables, new_rescales
from testbed.live.job_compression import compress_rates
from testbed.model import ScaleDown
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.scaling import job_rescale
from testbed.run_result import RunResult, verdict

EngineFactory = Callable[[FlinkSettings, RateSchedule], Engine]
DRAIN_POLL_S = 0.5


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
    counted: float  # counted in the keyed state (words / words per sentence)
    pending: float  # scheduled - counted: not counted when the drain ended
    replays: float  # emitted a second time after restarts (the source's emission ledger)
    drained: bool  # everything due was counted within the drain's bound

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def imbalances(self) -> Dict[str, float]:
        """What must be 0 once the drain finished: every sentence due emitted and counted exactly once."""
        return {"counted - scheduled": round(self.counted - self.scheduled, 6),
                "emitted - scheduled": round(self.emitted - self.scheduled, 6)}


@dataclass
class Recovery:
    """A lost TaskManager and its replacement (a row of details.recoveries)."""

    t_s: float  # run time it was found lost (the clock's, not the rows')
    taskmanager: str
    why: str
    replaced_by: str
    downtime_s: float = math.nan  # until the job ran at the deployed parallelism again (NaN: never)
    replayed: float = math.nan  # sentences the source emitted again meanwhile


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
class _Change:
    """A change of the cluster under way: the job is to run at `target` TaskManagers."""

    target: int
    t_s: float  # the row time it began (the rescales table's time)
    began: float  # the run time it began: a slow reading makes the rows lag behind the clock
    deadline: float  # run time it is given up
    replayed_before: float
    rescale: Optional[int] = None  # its row in the rescales table (None: replacements only)
    recoveries: List[int] = field(default_factory=list)  # the losses whose replacements it waits for
    starts: bool = False  # it starts TaskManagers (its duration measures a start)


class FlinkJobRun:
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Any, run_id: str,
                 run_dir: Optional[Path] = None, engine: Optional[EngineFactory] = None,
                 clock: Optional[Clock] = None) -> None:
        self.cfg, self.job, self.flink = cfg, cfg.job, cfg.backend.flink
        self.policy = policy
        self.run_id = run_id
        self.run_dir = run_dir
        self.make_engine = engine or self._cluster
        self.clock = clock or MonotonicClock()
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
        self.recoveries: List[Recovery] = []
        self.given_up: List[Dict[str, Any]] = []
        self.pending: Optional[_Change] = None
        self.last_change: Optional[_Change] = None  # the latest change begun (pending or done)
        self.recovering: Optional[int] = None  # a rescale whose lag has not come back yet
        self.ready_from: Dict[str, float] = {}  # per TaskManager: run time from which it is ready
        self.started_at: Dict[str, float] = {}  # per TaskManager: run time of its start
        self.seen_registered: Set[str] = set()
        self.n = 0
        self.up = False  # the job ran at the deployed parallelism at the last reading
        self.up_since = 0.0
        self.t0 = self.clock.now()
        self.slowest_start_s = 0.0  # the longest start measured: TaskManagers launched -> the job runs with them
        self.replayed = 0.0  # sentences the source emitted again after restarts, so far
        self.fault: Optional[str] = None  # why the run could not go on (it ends early, incomplete)
        self.engine: Optional[Engine] = None

    def _cluster(self, settings: FlinkSettings, schedule: RateSchedule) -> Engine:
        work_dir = (self.run_dir / "flink") if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="flink-"))
        return ClusterEngine(FlinkCluster(settings, schedule, work_dir))

    @property
    def workers(self) -> List[str]:
        """Worker w is the w-th of our TaskManagers (oldest first; the newest are stopped first)."""
        return self.engine.taskmanagers() if self.engine is not None else []

    def now(self) -> float:
        return self.clock.now() - self.t0

    def bound_s(self) -> float:
        return change_bound_s(self.slowest_start_s, self.settings)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        engine = self.engine = self.make_engine(self.settings, self.schedule)
        try:
            first = self._start(engine)
            self._loop(engine, first)
            accounting = self._drain(engine) if self.fault is None else self._account(engine.read(), False)
            record = engine.record()
        finally:
            engine.close()
        tables = self._tables()
        details = self._details(accounting, record)
        print(f"flink job {self.run_id}: {len(self.series.arrivals)} s, {len(self.rescales['t_s'])} rescale(s), "
              f"{len(self.recoveries)} TaskManager(s) replaced, accounting {accounting.as_dict()}",
              file=sys.stderr, flush=True)
        return RunResult(tables, float(len(self.series.arrivals)), details, incomplete=self._verdict(accounting))

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
        engine.start(n0)
        launched = self.clock.now()
        first = self._wait(engine, lambda r: _runs_at(r, n0) and r.source is not None,
                           f"the job runs at parallelism {n0}", self.settings.start_timeout_s)
        self.t0 = self.clock.now()
        self.slowest_start_s = self.t0 - launched
        self.n = n0
        self.ready_from = {name: 0.0 for name in engine.taskmanagers()}
        self.started_at = {name: 0.0 for name in engine.taskmanagers()}
        self.up = True
        return first

    def _wait(self, engine: Engine, ok: Callable[[JobReading], bool], what: str, timeout_s: float) -> JobReading:
        deadline = self.clock.now() + timeout_s
        while True:
            reading = engine.read()
            self.seen_registered |= set(reading.registered)
            if ok(reading):
                return reading
            exited = engine.exited()
            if exited:
                name, status = next(iter(exited.items()))
                raise FlinkClusterError(f"{name} exited ({exit_status(status)}) before {what}: "
                                        f"{engine.log_tail(name)}")
            if self.clock.now() > deadline:
                raise FlinkClusterError(f"timed out after {timeout_s:.0f} s before {what} (last: status "
                                        f"{reading.status}, parallelism {reading.parallelism}, "
                                        f"errors {reading.errors})")
            self.clock.sleep(0.25)

    def _loop(self, engine: Engine, first: JobReading) -> None:
        interval = self.policy.interval_s
        next_decision = float(interval) if interval else math.inf
        prev = first
        for k in range(self.duration):
            delay = self.t0 + (k + 1) - self.clock.now()
            if delay > 0:
                self.clock.sleep(delay)
            cur = engine.read()
            self._faults(engine, cur, float(k + 1))
            if self.fault is not None:
                return
            self._row(k, prev, cur)
            self._track_change(k, cur)
            prev = cur
            if k + 1 >= next_decision - 1e-9 and k + 1 < self.duration:
                assert interval  # next_decision is finite only with an interval
                next_decision += interval
                self._decide(engine, k)

    # -- faults --------------------------------------------------------------------------------
    def _faults(self, engine: Engine, cur: JobReading, t: float) -> None:
        """Finds what went wrong since the last reading (`t`: its row's time): a fault that ends the
        run, lost TaskManagers (replaced), a change past its bound (given up)."""
        now = self.now()
        self._attribute_replays(cur)
        registered = None if "rest" in cur.errors else set(cur.registered)
        self.seen_registered |= registered or set()
        exited = engine.exited()
        if JOBMANAGER in exited:
            self.fault = (f"the JobManager exited ({exit_status(exited[JOBMANAGER])}) at t={now:.0f} s: "
                          f"{engine.log_tail(JOBMANAGER)}")
            return
        if cur.status in TERMINAL_STATES:
            self.fault = f"the job is {cur.status} at t={now:.0f} s: {engine.log_tail(JOBMANAGER)}"
            return
        losses = find_losses(engine.taskmanagers(), exited, registered, self.seen_registered)
        if self.pending is not None and now >= self.pending.deadline:
            losses += self._give_up(engine, cur, registered, now, {loss.taskmanager for loss in losses})
        for loss in losses:
            self._replace(engine, loss, t, now)
            if self.fault is not None:
                return

    def _replace(self, engine: Engine, loss: Loss, t: float, now: float) -> None:
        """A lost TaskManager goes (killed if it still runs) and a new one starts in its place (`t`:
        the row time, `now`: the run time)."""
        name = loss.taskmanager
        if len(self.recoveries) >= self.flink.max_recoveries:
            self.fault = (f"TaskManager {name} lost at t={now:.0f} s ({loss.why}), with {len(self.recoveries)} "
                          f"replaced already (backend.flink.max_recoveries = {self.flink.max_recoveries})")
            return
        engine.remove(name, "kill")
        new = engine.add()
        self.started_at[new], self.ready_from[new] = now, math.inf
        self.ready_from.pop(name, None)
        self.recoveries.append(Recovery(round(now, 1), name, loss.why, new))
        print(f"flink job {self.run_id}: TaskManager {name} lost at t={now:.1f} s ({loss.why}): replaced by {new}",
              file=sys.stderr, flush=True)
        self.records.append(ActionRecord(t, "replace", JOB_OPERATOR, name, None, None,
                                         f"TaskManager {name} lost at t={now:.1f} s: {loss.why}; replaced by "
                                         f"{new}, the job restarts from its last checkpoint"))
        p = self.pending
        if p is None:
            p = self.pending = self.last_change = _Change(self.n, t, now, now + self.bound_s(), self.replayed)
        p.recoveries.append(len(self.recoveries) - 1)
        p.starts = True
        p.deadline = max(p.deadline, now + self.bound_s())

    def _give_up(self, engine: Engine, cur: JobReading, registered: Optional[Set[str]], t: float,
                 lost: Set[str]) -> List[Loss]:
        """The change under way took longer than its bound: it is given up (the controller decides
        again) and TaskManagers that never registered are replaced."""
        p = self.pending
        assert p is not None
        reason = (f"the job did not run at {p.target} TaskManager(s) within {p.deadline - p.began:.0f} s of "
                  f"t={p.began:.0f} s (status {cur.status}, parallelism {cur.parallelism}, registered "
                  f"{sorted(cur.registered)})")
        print(f"flink job {self.run_id}: given up at t={t:.0f} s: {reason}", file=sys.stderr, flush=True)
        self.given_up.append({"t_s": round(t, 1), "rescale": p.rescale, "reason": reason})
        self.pending = None
        ours = [name for name in engine.taskmanagers() if name not in lost]
        return unregistered(ours, registered, self.started_at, t, self.bound_s())

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
        up = _runs_at(cur, self.n)
        if up and not self.up:
            self.up_since = float(k)
        self.up = up
        s.running.append(min(cur.parallelism, self.n) if cur.status == "RUNNING" else 0)
        s.parallel.append(self.n)
        s.uptime.append(k + 1.0 - self.up_since if up else 0.0)
        self._latency(k, prev, cur)

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
    def _decide(self, engine: Engine, k: int) -> None:
        rescale = job_rescale(self.n, self.policy.decide_job(self._snapshot(k)), self.top)
        if rescale is None or self.pending is not None:
            return  # no change, or the cluster is still changing
        target, actions = rescale
        now = float(k + 1)
        for a in actions:
            inst = a.instance if isinstance(a, ScaleDown) else None
            self.records.append(ActionRecord(now, a.kind, JOB_OPERATOR, inst, None, None, a.reason))
        self._rescale(engine, k, target)

    def _rescale(self, engine: Engine, k: int, target: int) -> None:
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
            name = engine.add()
            self.started_at[name], self.ready_from[name] = self.now(), math.inf  # until the job runs with it
        for name in engine.taskmanagers()[target:]:
            engine.remove(name, self.settings.stop_mode)
            self.ready_from.pop(name, None)
        self.n = target
        began = self.now()
        self.pending = self.last_change = _Change(target, now, began, began + self.bound_s(), self.replayed,
                                                  rescale=len(self.rescales["t_s"]) - 1, starts=target > n)

    def _track_change(self, k: int, cur: JobReading) -> None:
        """Ends a change once the job runs at its target (its downtime, what it replayed; a start's
        duration is a measured start); then waits for a rescale's lag to recover."""
        t = float(k + 1)
        self._settle(cur, t)
        i = self.recovering
        if i is not None and self.pending is None and self.series.running[-1] > 0 \
                and self.series.lag[-1] <= max(self.rescales["lag_before"][i], self.series.arrivals[-1]):
            self.rescales["recovered_s"][i] = t - self.rescales["t_s"][i]
            self.recovering = None

    def _settle(self, cur: JobReading, t: Optional[float]) -> None:
        """Ends the change under way once the job runs at its target: its downtime (a rescale's in
        row time `t`, or, during the drain (`t` None), on the clock), and a start's duration."""
        p = self.pending
        if p is None or not self._settled(cur, p.target):
            return
        now = self.now()
        if p.rescale is not None:
            self.rescales["downtime_s"][p.rescale] = t - p.t_s if t is not None else round(now - p.began, 1)
            self.recovering = p.rescale if t is not None else None
        for r in p.recoveries:
            self.recoveries[r].downtime_s = round(now - self.recoveries[r].t_s, 1)
        if p.starts:
            self.slowest_start_s = max(self.slowest_start_s, now - p.began)
        if t is not None:
            for name in self.workers:
                self.ready_from[name] = min(self.ready_from.get(name, t), t)
        self.pending = None

    def _attribute_replays(self, cur: JobReading) -> None:
        """A change's replays: what the source emitted again from its start until the next change
        began (a restart's re-emission shows in the ledger once the new source attempt runs, which
        the readings may see only after the job runs at its target)."""
        if cur.source is not None:
            self.replayed = max(self.replayed, cur.source.replayed)
        c = self.last_change
        if c is None:
            return
        replayed = self.replayed - c.replayed_before
        if c.rescale is not None:
            self.rescales["replayed"][c.rescale] = int(round(replayed))
        for r in c.recoveries:
            self.recoveries[r].replayed = replayed

    def _settled(self, cur: JobReading, target: int) -> bool:
        """The job runs at `target` with every one of our TaskManagers registered: right after a loss
        the REST API may still show the old parallelism, before it knows of the replacement."""
        return _runs_at(cur, target) and set(self.workers) <= set(cur.registered)

    def _snapshot(self, k: int) -> JobSnapshot:
        s = self.series
        lo = max(0, k + 1 - self.job.window_s)
        sl = slice(lo, k + 1)
        thr, cpu = np.array(s.thr[sl]), np.array(s.cpu[sl])
        names = {f"w{w}": w for w in range(self.n)}
        tms = self.workers
        return JobSnapshot(
            t=float(k + 1), parallelism=self.n, max_scaleout=self.top, checkpoint_s=self.job.checkpoint_s,
            lag=float(s.lag[k]), seconds=np.arange(lo + 1, k + 2, dtype=float),
            workload=np.array(s.arrivals[sl], dtype=float),
            throughput={name: thr[:, w].copy() for name, w in names.items()},
            cpu={name: cpu[:, w].copy() for name, w in names.items()}, uptime=np.array(s.uptime[sl], dtype=float),
            ready={name: w < len(tms) and self.ready_from.get(tms[w], 0.0) <= k + 1 for name, w in names.items()})

    # -- the end -------------------------------------------------------------------------------
    def _drain(self, engine: Engine) -> Accounting:
        """Waits until everything the schedule made due is counted: at most drain_timeout_s, or
        until a change under way (a replaced TaskManager) is done or given up, whichever is later.
        Faults are handled meanwhile as during the run."""
        total = float(self.schedule.total())
        deadline = self.now() + self.flink.drain_timeout_s
        reading = engine.read()
        while not _counted_all(reading, total, self.wps):
            t = self.now()
            self._faults(engine, reading, t)
            self._settle(reading, None)
            if self.fault is not None or t >= max(deadline, self.pending.deadline if self.pending else 0.0):
                break
            self.clock.sleep(DRAIN_POLL_S)
            reading = engine.read()
            self._attribute_replays(reading)
        return self._account(reading, _counted_all(reading, total, self.wps))

    def _account(self, reading: JobReading, drained: bool) -> Accounting:
        src = reading.source
        counted = reading.counted() / self.wps
        scheduled = src.scheduled if src is not None else float(self.schedule.total())
        return Accounting(scheduled=scheduled, emitted=src.emitted if src is not None else math.nan,
                          counted=counted, pending=scheduled - counted, replays=self.replayed, drained=drained)

    def _tables(self) -> Dict[str, Dict[str, list]]:
        s = self.series
        thr = np.array(s.thr) if s.thr else np.zeros((0, self.top))
        cpu = np.array(s.cpu) if s.cpu else np.zeros((0, self.top))
        return job_tables(int(round(self.cfg.runtime.monitoring_s)), np.array(s.arrivals), thr, cpu,
                          np.array(s.lag), s.parallel, s.running, s.lat_t, s.lat_ms, self.records, self.policy,
                          self.rescales)

    def _details(self, accounting: Accounting, record: Dict[str, Any]) -> Dict[str, Any]:
        capacity = {str(n): n * self.flink.tm_rate for n in range(1, self.top + 1)}
        details: Dict[str, Any] = {
            "job": {"mu": self.flink.tm_rate, "capacity": capacity, "peak_rate": self.peak_rate,
                    "items": accounting.scheduled, "unprocessed_at_end": accounting.pending, "flink": True},
            "accounting": accounting.as_dict(), "flink": record,
            "recoveries": [dataclasses.asdict(r) for r in self.recoveries], "given_up": self.given_up,
            "time_compression": self.flink.time_compression}
        controller = self.policy.run_details()
        if controller is not None:
            details["controller"] = controller
        return details


def _runs_at(reading: JobReading, n: int) -> bool:
    return reading.status == "RUNNING" and reading.parallelism == n


def _counted_all(reading: JobReading, total: float, wps: int) -> bool:
    return reading.source is not None and reading.counted() >= total * wps
