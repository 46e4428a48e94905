"""A fake clock and a fake reactive-mode Flink for the job-mode run's control loop
(testbed/live/flink_job.py): the fault paths without a real engine.

The fake job in a few rules: a TaskManager registers `register_s` after its start (never, for the
starts listed in `hangs`); the job runs at the number of registered TaskManagers `restart_s` after
that number last changed (reactive mode), and while it runs every sentence due is counted at once,
unless a registered TaskManager is frozen (the job stalls) or from `stall_at` on. Each restart makes
the source emit `replay` sentences again. A killed TaskManager's process exits at once; a frozen one
is dropped by the JobManager `heartbeat_s` after it froze.

With `adaptive` (the adaptive scheduler, per-vertex mode) each vertex runs at its requirement or at
the registered slots, whichever is less, and the job restarts `restart_s` after that changed; every
registered TaskManager i runs subtask i of each vertex whose parallelism exceeds i. A subtask is busy
`COST_S` per record: its accumulated busy time is that times its records, and its busy gauge behaves
as Flink's (1000 ms/s until the gauge's first update 5 s after the attempt started, then the mean
over the last 5-60 s, updated every 5 s); with `capacity` it takes at most 1 / COST_S records a
second, the job as many as its slowest vertex (a backlog builds up). Reads started within a
`slow_reads` interval take its seconds (a loaded machine); those within a `tasks_missing` interval
lack every subtask's metrics.
An application whose main method throws (`main_error`: from a clock time, with a stack trace) runs no
job and its REST API lists it FAILED with that trace; a job whose every attempt fails before it runs
(`task_error`) restarts every `restart_s` while TaskManagers are registered, each failure in its
exception history. Both are answered as the REST API's JSON (`rest`), which the engine reads as it
reads the real one's (testbed/flink/faults.py `why_not_started`).
With `windows` (the windowed jobs) half of what is counted is let go by the filter and the rest
admitted to windows, whose results stand for it at once, or never once `windows_stop_at` has passed
(windows that do not fire)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

from testbed.flink.engine import JOBMANAGER
from testbed.flink.faults import NO_JOB, why_not_started
from testbed.flink.metrics import (
    JobReading,
    SourceReading,
    SubtaskReading,
    TaskManagerReading,
    TaskReading,
    VertexState,
)
from testbed.flink.schedule import RateSchedule
from testbed.flink.vertices import COUNTER, SOURCE, SPLITTER, requirements_body

# the vertices' names as the REST API shows them, and their tasks' as the Prometheus reporter labels them
FLINK_NAMES = {SOURCE.name: "Source: source", SPLITTER.name: "split", COUNTER.name: "count -> discard: Writer"}
TASK_LABELS = {SOURCE.name: "Source:_source", SPLITTER.name: "split", COUNTER.name: "count____discard:_Writer"}
IDS = {name: f"id-{name}" for name in FLINK_NAMES}
# each subtask's busy time per record: the WordCount job's counter waits 5 ms a word (200 words/s a subtask)
COST_S = {SPLITTER.name: 0.0002, COUNTER.name: 0.005}
GAUGE_STEP_S, GAUGE_STEPS = 5.0, 12  # Flink's busy gauge: updated every 5 s, over at most the last 12 steps


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.01)


@dataclass
class FakeTaskManager:
    started: float
    register_s: float
    status: Optional[int] = None  # the exit status once its process has exited
    frozen_at: Optional[float] = None


class FakeFlink:
    def __init__(self, clock: FakeClock, schedule: RateSchedule, wps: int = 8, register_s: float = 10.0,
                 restart_s: float = 2.0, heartbeat_s: float = 5.0, replay: float = 7.0, adaptive: bool = False,
                 windows: bool = False) -> None:
        self.clock, self.schedule, self.wps, self.windows = clock, schedule, wps, windows
        self.windows_stop_at = float("inf")
        self.windowed = 0.0  # units the window results stood for
        self.adaptive = adaptive
        self.required: Dict[str, int] = {}  # adaptive: each vertex's requirement (upper bound)
        self.bodies: List[dict] = []  # the bodies of the resource-requirements calls
        self.epoch_counted = 0.0  # sentences counted when the job last (re)started
        self.register_s, self.restart_s, self.heartbeat_s, self.replay = register_s, restart_s, heartbeat_s, replay
        self.tms: Dict[str, FakeTaskManager] = {}
        self.hangs: Set[int] = set()  # numbers of the starts that never register
        self.kills: List[Tuple[float, str]] = []  # (clock time, TaskManager) to SIGKILL
        self.freezes: List[Tuple[float, str]] = []  # (clock time, TaskManager) to SIGSTOP
        self.stall_at = float("inf")  # clock time from which nothing is counted any more
        self.jobmanager_exit_at = float("inf")
        self.started = 0
        self.removed: List[Tuple[str, str]] = []  # (TaskManager, mode)
        self.closed = False
        self.job_start: Optional[float] = None
        self.counted = 0.0  # sentences
        self.replayed = 0.0
        self.epoch = 0
        self.members: Tuple[str, ...] = ()  # the registered TaskManagers, as last read
        self.epoch_members: Tuple[str, ...] = ()  # those the job last (re)started with
        self.changed_at = 0.0
        self.jobmanager_status: Optional[int] = None
        # cores each registered TaskManager's cgroup uses (its CPU time grows by this per second);
        # None: no cgroup, as in the wait mode
        self.cgroup_cores: Optional[float] = None
        self.source_missing: List[Tuple[float, float]] = []  # clock intervals whose readings lack the source
        self.slow_reads: List[Tuple[float, float, float]] = []  # (from, to, seconds a read started then takes)
        self.tasks_missing: List[Tuple[float, float]] = []  # clock intervals whose readings lack the subtasks
        self.epoch_at = 0.0  # clock time the current attempts started
        self.capacity = False  # adaptive: each subtask takes at most 1 / COST_S records a second
        self.history: List[Tuple[float, float]] = []  # (clock time, sentences counted) at every read
        self.main_error: Optional[Tuple[float, str]] = None  # (clock time, stack trace) the application fails with
        self.task_error: Optional[str] = None  # the stack trace every attempt of the job fails with
        self.failures: List[Tuple[float, str]] = []  # the job's exception history: (clock time, stack trace)

    # -- the Engine interface ------------------------------------------------------------------------
    def start(self, n: int) -> None:
        self.required = {SOURCE.name: 1, SPLITTER.name: n, COUNTER.name: n}
        for _ in range(n):
            self.add()

    def require(self, parallelism: Dict[str, int]) -> None:
        assert self.adaptive, "reactive mode refuses resource requirements"
        self.bodies.append(requirements_body(IDS, parallelism))
        self.required = dict(parallelism)

    def add(self) -> str:
        self.started += 1
        name = f"tm-{self.started}"
        hang = self.started in self.hangs
        self.tms[name] = FakeTaskManager(self.clock.now(), float("inf") if hang else self.register_s)
        return name

    def remove(self, name: str, mode: str) -> None:
        self.removed.append((name, mode))
        del self.tms[name]

    def taskmanagers(self) -> List[str]:
        return list(self.tms)

    def exited(self) -> Dict[str, Optional[int]]:
        self._apply_faults()
        exited = {name: tm.status for name, tm in self.tms.items() if tm.status is not None}
        if self.jobmanager_status is not None:
            exited[JOBMANAGER] = self.jobmanager_status
        return exited

    def log_tail(self, name: str) -> str:
        return f"{name}: no log (fake)"

    def start_failure(self, status: str) -> Optional[str]:
        return why_not_started(self.rest, "fake-job", status, self.job_start is not None)

    def rest(self, path: str) -> Dict:
        """The REST API's answers about the application and the job's failures, shaped as Flink 2.3's."""
        failed = self.main_error is not None and self.clock.now() >= self.main_error[0]
        if path == "/applications/overview":
            return {"applications": [{"id": "app-1", "name": "testbed", "status": "FAILED" if failed else "RUNNING"}]}
        if path == "/applications/app-1/exceptions":
            entries = [{"exceptionName": "ProgramInvocationException", "stacktrace": self.main_error[1],
                        "timestamp": 1}] if failed and self.main_error else []
            return {"exceptionHistory": {"entries": entries, "truncated": False}}
        if path == "/jobs/fake-job/exceptions":
            entries = [{"exceptionName": "RuntimeException", "stacktrace": trace, "timestamp": int(at)}
                       for at, trace in reversed(self.failures)]
            return {"exceptionHistory": {"entries": entries, "truncated": False}}
        raise OSError(f"404: {path}")

    def record(self) -> dict:
        return {"engine": "fake", "processes": sorted(self.tms)}

    def close(self) -> None:
        self.closed = True
        self.tms.clear()

    def read(self) -> JobReading:
        for a, b, seconds in self.slow_reads:
            if a <= self.clock.now() < b:
                self.clock.sleep(seconds)
        if self.history and self.clock.now() <= self.history[-1][0]:
            self.clock.sleep(0.01)  # a read right after a late one still takes a moment
        now = self.clock.now()
        self._apply_faults()
        registered = tuple(sorted(self._registered(now)))
        shape = self._shape(registered)
        if shape != self.members:
            self.members, self.changed_at = shape, now
        running = bool(registered) and now >= self.changed_at + self.restart_s
        if self.main_error is not None and now >= self.main_error[0]:
            return JobReading(now, NO_JOB, 0, registered, (), None, {}, ())  # no job was ever submitted
        if running and self.task_error is not None:  # the attempt fails: restart_s until the next one
            self.failures.append((now, self.task_error))
            self.changed_at, running = now, False
        if running and self.job_start is None:
            self.job_start, self.epoch, self.epoch_members, self.epoch_at = now, 1, shape, now
        scheduled = float(self.schedule.due_at(now - self.job_start)) if self.job_start is not None else 0.0
        if running and self.epoch_members != shape:
            self.epoch += 1
            self.replayed += self.replay
            self.epoch_members = shape
            self.epoch_counted, self.epoch_at = self.counted, self.changed_at + self.restart_s
        frozen = any(self.tms[n].frozen_at is not None for n in registered)
        if running and not frozen and now < self.stall_at:
            self.counted = self._progress(scheduled, now, shape)
        if now < self.windows_stop_at:
            self.windowed = self.counted * self.wps - self._dropped()
        self.history.append((now, self.counted))
        return self._reading(now, registered, running, scheduled)

    # -- the fake job ----------------------------------------------------------------------------------
    def _apply_faults(self) -> None:
        now = self.clock.now()
        for at, name in self.kills:
            if now >= at and name in self.tms and self.tms[name].status is None:
                self.tms[name].status = -9
        for at, name in self.freezes:
            if now >= at and name in self.tms and self.tms[name].frozen_at is None:
                self.tms[name].frozen_at = at
        if now >= self.jobmanager_exit_at:
            self.jobmanager_status = 1

    def _shape(self, registered: Tuple[str, ...]) -> Tuple:
        """What the job restarts on a change of: the TaskManagers (reactive), the vertices' parallelism (adaptive)."""
        return tuple(sorted(self._parallelism(registered).items())) if self.adaptive else registered

    def _parallelism(self, registered: Tuple[str, ...]) -> Dict[str, int]:
        return {name: min(n, len(registered)) for name, n in self.required.items()}

    def _tasks(self, i: int, p: Dict[str, int], now: float) -> Tuple[TaskReading, ...]:
        """TaskManager i's subtasks: one of each vertex whose parallelism exceeds i."""
        tasks = []
        for name in (SPLITTER.name, COUNTER.name):
            if i < p[name]:
                records = self._records(name, p, now)
                out = records * self.wps if name == SPLITTER.name else 0.0
                tasks.append(TaskReading(TASK_LABELS[name], i, f"a{self.epoch}-{name}-{i}", records, out,
                                         self._gauge_ms(name, p, now), 1000.0 * COST_S[name] * records))
        return tuple(tasks)

    def _progress(self, scheduled: float, now: float, shape: Tuple) -> float:
        """Sentences counted by now: all that are due, or with `capacity` what the slowest vertex's
        subtasks can take in since the last read (or since the attempts started)."""
        if not (self.capacity and self.adaptive):
            return scheduled
        p = dict(shape)
        since = max(self.history[-1][0] if self.history else now, self.epoch_at)
        per_sentence = {SPLITTER.name: COST_S[SPLITTER.name], COUNTER.name: COST_S[COUNTER.name] * self.wps}
        rate = min(p[name] / cost for name, cost in per_sentence.items())
        return min(scheduled, self.counted + rate * max(0.0, now - since))

    def _records(self, name: str, p: Dict[str, int], at: float) -> float:
        """Records each subtask of vertex `name` has taken in since its attempt started, at clock time `at`."""
        counted = max((c for t, c in self.history if t <= at), default=self.epoch_counted)
        sentences = max(0.0, counted - self.epoch_counted) / p[name]
        return sentences if name == SPLITTER.name else sentences * self.wps

    def _gauge_ms(self, name: str, p: Dict[str, int], now: float) -> float:
        """busyTimeMsPerSecond as Flink computes it: 1000 before its first update, then the busy share of
        the updates' span (at most the last GAUGE_STEPS)."""
        updates = int((now - self.epoch_at) // GAUGE_STEP_S)
        if updates == 0:
            return 1000.0
        steps = min(updates, GAUGE_STEPS)
        t1 = self.epoch_at + updates * GAUGE_STEP_S
        busy = COST_S[name] * (self._records(name, p, t1) - self._records(name, p, t1 - steps * GAUGE_STEP_S))
        return 1000.0 * min(1.0, busy / (steps * GAUGE_STEP_S))

    def _dropped(self) -> float:
        return self.counted * self.wps / 2 if self.windows else 0.0

    def _registered(self, now: float) -> List[str]:
        return [name for name, tm in self.tms.items()
                if tm.status is None and now >= tm.started + tm.register_s
                and (tm.frozen_at is None or now < tm.frozen_at + self.heartbeat_s)]

    def _reading(self, now: float, registered: Tuple[str, ...], running: bool, scheduled: float) -> JobReading:
        tms = []
        p = self._parallelism(registered) if self.adaptive else {}
        for i, name in enumerate(n for n in registered if self.tms[n].frozen_at is None):
            words = self.counted * self.wps if i == 0 else 0.0
            subtask = SubtaskReading(0, f"a{self.epoch}-{name}", words, words, 500.0, 10.0, 20.0, 10.0 * words)
            source = SourceReading(scheduled, scheduled, 0.0, 0.0, self.replayed) if i == 0 else None
            dropped, windowed = (self._dropped(), self.windowed) if i == 0 and self.windows else (0.0, 0.0)
            cgroup = None if self.cgroup_cores is None else self.cgroup_cores * (now - self.tms[name].started)
            missing = any(a <= now < b for a, b in self.tasks_missing)
            tasks = self._tasks(i, p, now) if running and self.adaptive and not missing else ()
            tms.append(TaskManagerReading(name, 0.1, 1.0, 100.0, (subtask,) if running else (), source,
                                          cgroup_cpu_s=cgroup, tasks=tasks, dropped=dropped, windowed=windowed))
        source = tms[0].source if tms else None
        if any(a <= now < b for a, b in self.source_missing):  # its metrics not reported (yet)
            source = None
        status = "RUNNING" if running else "RESTARTING"
        vertices = tuple(VertexState(IDS[v], FLINK_NAMES[v], n, status) for v, n in p.items())
        counting = p.get(COUNTER.name, len(registered)) if running else 0
        return JobReading(now, status, counting, registered, tuple(tms), source, {}, vertices)
