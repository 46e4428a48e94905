"""A reactive-mode Flink job as the job loop's engine (testbed/job/engine.py): each worker is one
TaskManager of one slot, a rescale adds TaskManagers or stops the newest ones, and every second's
row comes from two readings of the cluster (docs/flink.md#job-mode-runs)."""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Set

import numpy as np

from testbed.flink.cluster import FlinkClusterError
from testbed.flink.engine import JOBMANAGER, Engine
from testbed.flink.faults import TERMINAL_STATES, change_bound_s, exit_status, find_losses, unregistered
from testbed.flink.faults import Loss as FlinkLoss
from testbed.flink.metrics import JobRates, JobReading, SourceReading, rates
from testbed.flink.settings import FlinkSettings
from testbed.job.engine import Clock, Loss, Second
from testbed.job.ledger import Change, JobLedger

START_POLL_S = 0.25


class FlinkJobEngine:
    def __init__(self, engine: Engine, settings: FlinkSettings, tm_rate: float, top: int, ledger: JobLedger,
                 clock: Clock, now: Callable[[], float]) -> None:
        self.engine, self.settings, self.tm_rate, self.top = engine, settings, tm_rate, top
        self.ledger, self.clock, self.now = ledger, clock, now
        self.wps = settings.units  # counted units per source record
        self.n = 0
        self.up = False  # the job ran at the deployed parallelism at the last reading
        self.up_since = 0.0
        self.lag = 0.0  # at the last row
        self.ready_from: Dict[str, float] = {}  # per TaskManager: run time from which it is ready
        self.started_at: Dict[str, float] = {}  # per TaskManager: run time of its start
        self.seen_registered: Set[str] = set()
        self.slowest_start_s = 0.0  # the longest start measured: TaskManagers launched -> the job runs with them
        self.prev: Optional[JobReading] = None
        self.cur: Optional[JobReading] = None
        # the last reading that had the source's metrics: a second without them counts no arrivals
        # and the next that has them counts the arrivals of both, so none is lost
        self.last_source: Optional[SourceReading] = None
        self.exited: Dict[str, Optional[int]] = {}
        self.lat_t: List[float] = []
        self.lat_ms: List[float] = []

    @property
    def workers(self) -> List[str]:
        """Worker w is the w-th of our TaskManagers (oldest first; the newest are stopped first)."""
        return self.engine.taskmanagers()

    # -- starting ------------------------------------------------------------------------------
    def start(self, n: int) -> None:
        """The JobManager and n TaskManagers; returns once the job runs at n with its source."""
        self.engine.start(n)
        launched = self.clock.now()
        self.cur = self.prev = self.wait(lambda r: _runs_at(r, n) and r.source is not None,
                                         f"the job runs at parallelism {n}", self.settings.start_timeout_s)
        self.slowest_start_s = self.clock.now() - launched
        self.last_source = self.cur.source
        self.n = n
        self.ready_from = {name: 0.0 for name in self.engine.taskmanagers()}
        self.started_at = {name: 0.0 for name in self.engine.taskmanagers()}
        self.up = True

    def wait(self, ok: Callable[[JobReading], bool], what: str, timeout_s: float) -> JobReading:
        deadline = self.clock.now() + timeout_s
        while True:
            reading = self.engine.read()
            self.seen_registered |= set(reading.registered)
            if ok(reading):
                return reading
            exited = self.engine.exited()
            if exited:
                name, status = next(iter(exited.items()))
                raise FlinkClusterError(f"{name} exited ({exit_status(status)}) before {what}: "
                                        f"{self.engine.log_tail(name)}")
            why = self.engine.start_failure(reading.status)
            if why is not None:
                raise FlinkClusterError(f"{why} (before {what})")
            if self.clock.now() > deadline:
                raise FlinkClusterError(f"timed out after {timeout_s:.0f} s before {what} (last: status "
                                        f"{reading.status}, parallelism {reading.parallelism}, "
                                        f"errors {reading.errors})")
            self.clock.sleep(START_POLL_S)

    # -- measuring -----------------------------------------------------------------------------
    def observe(self, k: int) -> None:
        self.read()

    def read(self) -> JobReading:
        """A reading of the cluster, which the fault checks and the next row work from."""
        cur = self.cur = self.engine.read()
        self._attribute_replays(cur)
        self.seen_registered |= self._registered() or set()
        return cur

    def _registered(self) -> Optional[Set[str]]:
        """The registered TaskManagers; None when the REST API could not be read."""
        assert self.cur is not None
        return None if "rest" in self.cur.errors else set(self.cur.registered)

    def _attribute_replays(self, cur: JobReading) -> None:
        """A change's replays: what the source emitted again from its start until the next change
        began (a restart's re-emission shows in the ledger once the new source attempt runs, which
        the readings may see only after the job runs at its target)."""
        led = self.ledger
        if cur.source is not None:
            led.replayed = max(led.replayed, cur.source.replayed)
        c = led.last_change
        if c is None:
            return
        replayed = led.replayed - c.replayed_before
        if c.rescale is not None:
            led.rescales["replayed"][c.rescale] = int(round(replayed))
        for r in c.recoveries:
            led.recoveries[r].replayed = replayed

    def measure(self, k: int) -> Optional[Second]:
        prev, cur = self.prev, self.cur
        assert prev is not None and cur is not None
        r = rates(prev, cur)
        thr, cpu = np.zeros(self.top), np.full(self.top, np.nan)
        utilisation = self._utilisation(r)
        for w, name in enumerate(self.workers[:self.n]):
            thr[w] = r.throughput.get(name, 0.0) * r.dt / self.wps
            if name in utilisation:
                cpu[w] = utilisation[name]
        arrivals = self._arrivals(cur)
        backlog = cur.backlog(self.wps)
        self.lag = backlog if math.isfinite(backlog) else self.lag
        up = self.runs_as_deployed(cur)
        if up and not self.up:
            self.up_since = float(k)
        self.up = up
        self._latency(k, prev, cur)
        self.prev = cur
        return Second(arrivals=arrivals, thr=thr, cpu=cpu, lag=self.lag, uptime=k + 1.0 - self.up_since if up else 0.0,
                      parallel=self.n, running=self.running(cur))

    def runs_as_deployed(self, cur: JobReading) -> bool:
        """The job runs at what was deployed (reactive mode: its parallelism is the TaskManagers')."""
        return _runs_at(cur, self.n)

    def running(self, cur: JobReading) -> int:
        """The workers the job runs on now."""
        return min(cur.parallelism, self.n) if cur.status == "RUNNING" else 0

    def _utilisation(self, r: JobRates) -> Mapping[str, float]:
        """Per TaskManager, the CPU utilisation the controllers read (`cpu_reading`)."""
        if self.settings.cpu_reading == "cgroup":
            return {name: cores / self.settings.tm_cpu_limit for name, cores in r.cgroup_cpu.items()}
        return r.busy

    def _arrivals(self, cur: JobReading) -> float:
        """Sentences due since the last reading with the source's metrics (0 while they are missing)."""
        if cur.source is None:
            return 0.0
        last, self.last_source = self.last_source, cur.source
        return cur.source.scheduled - last.scheduled if last is not None else 0.0

    def _latency(self, k: int, prev: JobReading, cur: JobReading) -> None:
        """The mean latency of the units counted in second k (same task attempts in both readings)."""
        before = {st.attempt: st for tm in prev.taskmanagers for st in tm.subtasks}
        words = total = 0.0
        for tm in cur.taskmanagers:
            for st in tm.subtasks:
                old = before.get(st.attempt)
                if old is not None and st.latency_n > old.latency_n:
                    words += st.latency_n - old.latency_n
                    total += st.latency_sum_ms - old.latency_sum_ms
        if words > 0:
            self.lat_t.append(k + 1.0)
            self.lat_ms.append(total / words)

    def parallelism(self) -> int:
        return self.n

    def ready(self, t: float) -> Dict[str, bool]:
        tms = self.workers
        return {f"w{w}": w < len(tms) and self.ready_from.get(tms[w], 0.0) <= t for w in range(self.n)}

    # -- changing ------------------------------------------------------------------------------
    def rescale(self, k: int, target: int) -> Optional[int]:
        """Adds TaskManagers or stops the newest; reactive mode restarts the job from its last checkpoint."""
        n, t = self.n, float(k + 1)
        how = "started" if target > n else f"stopped ({self.settings.stop_mode})"
        self.ledger.record(t, "restart", f"reactive rescale {n} -> {target} TaskManagers: {abs(target - n)} "
                                         f"{how}; the job restarts from its last checkpoint")
        row = self.ledger.open_rescale(t, n, target, float(self.lag), n * self.tm_rate, target * self.tm_rate)
        for _ in range(n, target):
            name = self.engine.add()
            self.started_at[name], self.ready_from[name] = self.now(), math.inf  # until the job runs with it
        for name in self.engine.taskmanagers()[target:]:
            self.engine.remove(name, self.settings.stop_mode)
            self.ready_from.pop(name, None)
        self.n = target
        return row

    def settled(self, target: int) -> bool:
        """The job runs at `target` with every one of our TaskManagers registered: right after a loss
        the REST API may still show the old parallelism, before it knows of the replacement."""
        assert self.cur is not None
        return _runs_at(self.cur, target) and set(self.workers) <= set(self.cur.registered)

    def settle(self, change: Change, now: float, t: Optional[float]) -> None:
        """A change's duration is a measured start when it started TaskManagers; they are ready now."""
        if change.starts:
            self.slowest_start_s = max(self.slowest_start_s, now - change.began)
        if t is not None:
            for name in self.workers:
                self.ready_from[name] = min(self.ready_from.get(name, t), t)

    def change_bound_s(self) -> float:
        return change_bound_s(self.slowest_start_s, self.settings)

    # -- faults --------------------------------------------------------------------------------
    def fatal(self, now: float) -> Optional[str]:
        """The JobManager exited or the job failed for good."""
        cur = self.cur
        assert cur is not None
        exited = self.exited = self.engine.exited()
        if JOBMANAGER in exited:
            return (f"the JobManager exited ({exit_status(exited[JOBMANAGER])}) at t={now:.0f} s: "
                    f"{self.engine.log_tail(JOBMANAGER)}")
        if cur.status in TERMINAL_STATES:
            return f"the job is {cur.status} at t={now:.0f} s: {self.engine.log_tail(JOBMANAGER)}"
        return None

    def losses(self, now: float) -> List[Loss]:
        found = find_losses(self.engine.taskmanagers(), self.exited, self._registered(), self.seen_registered)
        return _ours(found)

    def stuck(self, now: float, lost: List[str]) -> List[Loss]:
        ours = [name for name in self.engine.taskmanagers() if name not in lost]
        return _ours(unregistered(ours, self._registered(), self.started_at, now, self.change_bound_s()))

    def replace(self, loss: Loss, now: float) -> str:
        """The lost TaskManager goes (killed) and a new one starts in its place."""
        self.engine.remove(loss.worker, "kill")
        new = self.engine.add()
        self.started_at[new], self.ready_from[new] = now, math.inf
        self.ready_from.pop(loss.worker, None)
        return new

    def state(self) -> str:
        cur = self.cur
        assert cur is not None
        return f"status {cur.status}, parallelism {cur.parallelism}, registered {sorted(cur.registered)}"

    def stop(self) -> None:
        self.engine.close()


def _ours(losses: List[FlinkLoss]) -> List[Loss]:
    return [Loss(loss.taskmanager, loss.why, loss.kill) for loss in losses]


def _runs_at(reading: JobReading, n: int) -> bool:
    return reading.status == "RUNNING" and reading.parallelism == n
