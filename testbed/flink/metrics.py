"""Reading Flink's metrics: the Prometheus reporter's text format (one endpoint per process) and
what the testbed takes from it per TaskManager and for the job (where a job keeps each figure: its
JobSpec, testbed/flink/jobs.py). Pure functions of the text."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from testbed.flink.jobs import WORDCOUNT, JobSpec

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# metric names of the jobs as the reporter writes them (scope components joined by _)
TM_CPU_LOAD = "flink_taskmanager_Status_JVM_CPU_Load"
TM_CPU_TIME = "flink_taskmanager_Status_JVM_CPU_Time"
TM_HEAP_USED = "flink_taskmanager_Status_JVM_Memory_Heap_Used"
TASK_BUSY = "flink_taskmanager_job_task_busyTimeMsPerSecond"
TASK_BUSY_ACC = "flink_taskmanager_job_task_accumulateBusyTimeMs"
TASK_RECORDS_IN = "flink_taskmanager_job_task_numRecordsIn"
TASK_RECORDS_OUT = "flink_taskmanager_job_task_numRecordsOut"
OP_RECORDS_IN = "flink_taskmanager_job_task_operator_numRecordsIn"
SOURCE_PENDING = "flink_taskmanager_job_task_operator_pendingRecords"
SOURCE_SCHEDULED = "flink_taskmanager_job_task_operator_scheduledRecords"
SOURCE_EMITTED = "flink_taskmanager_job_task_operator_emittedRecords"
SOURCE_START = "flink_taskmanager_job_task_operator_scheduleStartMs"
SOURCE_REPLAYED = "flink_taskmanager_job_task_operator_replayedRecords"
COUNTED = "flink_taskmanager_job_task_operator_countedWords"
OPERATOR_GAUGE = "flink_taskmanager_job_task_operator_"  # + a job's own gauge (JobSpec.counted_gauge)
DROPPED = "flink_taskmanager_job_task_operator_droppedRecords"  # records a filter let go, counted once
WINDOWED = "flink_taskmanager_job_task_operator_windowedRecords"  # records the window results stand for
WORK_NS = "flink_taskmanager_job_task_operator_workNanosPerWord"
LATENCY = "flink_taskmanager_job_task_operator_latencyMs"
LATENCY_SUM = "flink_taskmanager_job_task_operator_latencySumMs"


class MetricsFormatError(ValueError):
    """A line of a metrics endpoint that is not the Prometheus text format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_prometheus(text: str) -> List[Sample]:
    """Samples of a Prometheus text exposition (comments and blank lines skipped)."""
    samples = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise MetricsFormatError(f"line {number}: not a metric sample: {line[:120]!r}")
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(3) or "")}
        samples.append(Sample(m.group(1), labels, _number(m.group(4), number)))
    return samples


def _number(text: str, number: int) -> float:
    special = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise MetricsFormatError(f"line {number}: not a number: {text!r}") from None


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def select(samples: Iterable[Sample], name: str, **labels: str) -> List[Sample]:
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def first(samples: Iterable[Sample], name: str, **labels: str) -> Optional[float]:
    found = select(samples, name, **labels)
    return found[0].value if found else None


@dataclass(frozen=True)
class SubtaskReading:
    """A subtask of the job's working operator on one TaskManager (WordCount's counter; the other
    jobs' first stage), with what the TaskManager's subtasks of the counting operator counted."""

    subtask: int
    attempt: str  # the task attempt's id: a restart starts new attempts (and their counters at 0)
    records_in: float  # units processed by this attempt (a restart starts again at 0)
    # units counted exactly once on this TaskManager (checkpointed; replays are not counted twice):
    # admitted by the counting operator, plus what a filter let go
    counted: float
    busy_ms_per_s: float  # the working task's busy time
    latency_p50_ms: float
    latency_p95_ms: float
    latency_sum_ms: float
    work_ns_per_word: float = math.nan  # CPU time of a unit's work, as the job timed a sample of them
    latency_records: float = math.nan  # units whose latency is in latency_sum_ms (NaN: records_in)

    @property
    def latency_n(self) -> float:
        return self.records_in if math.isnan(self.latency_records) else self.latency_records


@dataclass(frozen=True)
class TaskReading:
    """One subtask of any vertex (its task: the operators chained in it), for per-vertex rates."""

    task: str  # the task's name as the reporter labels it (e.g. `split`, `count -> ...`)
    subtask: int
    attempt: str
    records_in: float  # records the task took in (this attempt)
    records_out: float  # records it sent downstream (this attempt)
    # Flink's busy gauge: 1000 until its first 5 s update after the attempt starts, then the mean over
    # the last 5-60 s in 5 s steps; NaN: not reported
    busy_ms_per_s: float
    # busy milliseconds since the attempt started (NaN before it runs or when not reported): wall time
    # less idle and back-pressured time, read at the same moment as the records, so that two readings
    # give the useful time between them
    busy_ms: float = math.nan


@dataclass(frozen=True)
class SourceReading:
    scheduled: float  # records due by the schedule so far
    emitted: float  # records emitted (after a restart: from the checkpoint on)
    pending: float  # scheduled - emitted: the consumer lag
    start_ms: float  # wall clock of the schedule's time 0
    # records emitted a second time after restarts, over the whole job (the source's EmissionLedger:
    # a restart resumes at its checkpoint's position, below the highest position ever emitted)
    replayed: float = 0.0


@dataclass(frozen=True)
class TaskManagerReading:
    name: str
    cpu_load: Optional[float]  # the JVM's CPU load as Flink reports it (fraction of the machine)
    cpu_time_s: Optional[float]  # the JVM's CPU time so far
    heap_used_mb: Optional[float]
    subtasks: Tuple[SubtaskReading, ...] = ()
    source: Optional[SourceReading] = None
    # mode cpu: the TaskManager cgroup's CPU time and the time its quota held it back, so far
    cgroup_cpu_s: Optional[float] = None
    cgroup_throttled_s: Optional[float] = None
    tasks: Tuple[TaskReading, ...] = ()  # every subtask it runs, of every vertex
    # jobs with filters and windows: the records its filter let go and those its window results stood for
    dropped: float = 0.0
    windowed: float = 0.0


def read_taskmanager(name: str, samples: List[Sample], spec: JobSpec = WORDCOUNT) -> TaskManagerReading:
    heap = first(samples, TM_HEAP_USED)
    cpu_time = first(samples, TM_CPU_TIME)
    return TaskManagerReading(
        name=name, cpu_load=first(samples, TM_CPU_LOAD),
        cpu_time_s=None if cpu_time is None else cpu_time / 1e9,
        heap_used_mb=None if heap is None else heap / 2 ** 20,
        subtasks=tuple(_subtasks(samples, spec)), source=_source(samples), tasks=tuple(_tasks(samples)),
        dropped=sum(s.value for s in select(samples, DROPPED)),
        windowed=sum(s.value for s in select(samples, WINDOWED)))


def _tasks(samples: List[Sample]) -> Iterable[TaskReading]:
    """Every subtask with a records-in counter, with its records out and busy time."""
    for s in select(samples, TASK_RECORDS_IN):
        on = {k: s.labels[k] for k in ("task_name", "subtask_index", "task_attempt_id") if k in s.labels}
        yield TaskReading(task=s.labels.get("task_name", ""), subtask=int(s.labels.get("subtask_index", "0")),
                          attempt=s.labels.get("task_attempt_id", ""), records_in=s.value,
                          records_out=first(samples, TASK_RECORDS_OUT, **on) or 0.0,
                          busy_ms_per_s=_nan(first(samples, TASK_BUSY, **on)),
                          busy_ms=_nan(first(samples, TASK_BUSY_ACC, **on)))


def _subtasks(samples: List[Sample], spec: JobSpec) -> Iterable[SubtaskReading]:
    """One reading per subtask of the working operator. A TaskManager has one slot, so it holds at most
    one subtask of each operator: what the counting operator and the filters counted there goes with
    the first (summed, so that nothing is lost if a TaskManager ever held more)."""
    counted_name = OPERATOR_GAUGE + spec.counted_gauge
    counters = select(samples, counted_name, operator_name=spec.count_operator)
    counted = sum(s.value for s in counters) + sum(s.value for s in select(samples, DROPPED))
    same = spec.work_operator == spec.count_operator
    ids = counters if same else select(samples, OP_RECORDS_IN, operator_name=spec.work_operator)
    at = {"operator_name": spec.count_operator}  # the latency: taken where the counting operator admits
    if counters:
        at["subtask_index"] = counters[0].labels.get("subtask_index", "0")
    for i, s in enumerate(ids):
        idx = s.labels.get("subtask_index", "0")
        on = dict(operator_name=spec.work_operator, subtask_index=idx)
        busy = [b.value for b in select(samples, TASK_BUSY, subtask_index=idx)
                if b.labels.get("task_name", "").startswith(spec.work_operator)]
        yield SubtaskReading(
            subtask=int(idx), attempt=s.labels.get("task_attempt_id", ""),
            records_in=first(samples, OP_RECORDS_IN, **on) or 0.0, counted=counted if i == 0 else 0.0,
            busy_ms_per_s=busy[0] if busy else math.nan,
            latency_p50_ms=_nan(first(samples, LATENCY, quantile="0.5", **at)),
            latency_p95_ms=_nan(first(samples, LATENCY, quantile="0.95", **at)),
            latency_sum_ms=first(samples, LATENCY_SUM, **at) or 0.0,
            work_ns_per_word=_nan(first(samples, WORK_NS, **on)),
            latency_records=math.nan if same else first(samples, OP_RECORDS_IN, **at) or 0.0)


def _source(samples: List[Sample]) -> Optional[SourceReading]:
    scheduled = first(samples, SOURCE_SCHEDULED)
    if scheduled is None:
        return None
    emitted = first(samples, SOURCE_EMITTED) or 0.0
    pending = first(samples, SOURCE_PENDING)
    return SourceReading(scheduled=scheduled, emitted=emitted,
                         pending=max(0.0, scheduled - emitted) if pending is None or math.isnan(pending) else pending,
                         start_ms=first(samples, SOURCE_START) or 0.0, replayed=first(samples, SOURCE_REPLAYED) or 0.0)


def _nan(value: Optional[float]) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True)
class VertexState:
    """A job vertex as the REST API shows it (GET /jobs/:jobid)."""

    id: str
    name: str
    parallelism: int  # what it runs at (or will, once scheduled)
    status: str


@dataclass(frozen=True)
class JobReading:
    """One look at the whole job: REST status and parallelism, the TaskManagers' metrics."""

    t: float  # seconds since the cluster started
    status: str  # the job's status (RUNNING, RESTARTING, ... ; NONE before it exists)
    parallelism: int  # of the counting vertex (0 while not running)
    registered: Tuple[str, ...]  # TaskManager resource ids the JobManager knows
    taskmanagers: Tuple[TaskManagerReading, ...] = ()
    source: Optional[SourceReading] = None
    errors: Dict[str, str] = field(default_factory=dict)  # endpoint -> why it could not be read
    vertices: Tuple[VertexState, ...] = ()  # every vertex of the job (empty before it exists)

    def counted(self) -> float:
        """Units counted exactly once over every subtask (WordCount: words in the keyed state; the
        others: records the windows admitted plus those the filter let go)."""
        return sum(st.counted for tm in self.taskmanagers for st in tm.subtasks)

    def admitted(self) -> float:
        """Units the counting operator admitted (what its windows hold or have emitted)."""
        return self.counted() - sum(tm.dropped for tm in self.taskmanagers)

    def windowed(self) -> float:
        """Records the window results emitted so far stand for (jobs with windows): admitted() once
        every window has fired."""
        return sum(tm.windowed for tm in self.taskmanagers)

    def backlog(self, units: int) -> float:
        """Source records due and not yet counted: the source's pending records plus what is in
        flight in the network buffers (which `pendingRecords` does not see). NaN without the source.
        Around a restart the subtasks read may mix old and new attempts, and the total with them."""
        if self.source is None:
            return math.nan
        return max(0.0, self.source.scheduled - self.counted() / units)

    def attempts(self) -> Dict[str, float]:
        """Words processed so far per task attempt of the counting operator."""
        return {st.attempt: st.records_in for tm in self.taskmanagers for st in tm.subtasks}

    def subtask_count(self) -> int:
        return sum(len(tm.subtasks) for tm in self.taskmanagers)


@dataclass(frozen=True)
class JobRates:
    """What happened between two readings, per second: the inputs a job-mode controller samples."""

    t: float  # time of the newer reading
    dt: float
    workload: float  # sentences the schedule made due per second
    emitted: float  # sentences the source emitted per second (negative across a restart's rollback)
    lag: float  # sentences due and not yet emitted, now
    throughput: Mapping[str, float]  # words counted per second, per TaskManager
    cpu: Mapping[str, float]  # cores used per TaskManager (its JVM's CPU time over the interval)
    busy: Mapping[str, float]  # the counting task's busy fraction per TaskManager
    parallelism: int
    status: str
    # mode cpu: cores per TaskManager by its cgroup's CPU time (the JVM and whatever its script ran)
    cgroup_cpu: Mapping[str, float] = field(default_factory=dict)


def rates(prev: JobReading, cur: JobReading) -> JobRates:
    """Per-second rates between two readings of the same cluster. A subtask attempt that is new in
    `cur` (the job restarted) counts from 0; a TaskManager missing from either reading is left out."""
    dt = cur.t - prev.t
    if dt <= 0:
        raise ValueError(f"readings out of order: {prev.t:.3f} then {cur.t:.3f}")
    before = {tm.name: tm for tm in prev.taskmanagers}
    throughput, cpu, busy, cgroup_cpu = {}, {}, {}, {}
    for tm in cur.taskmanagers:
        old = before.get(tm.name)
        if old is None:
            continue
        seen = {st.attempt: st.records_in for st in old.subtasks}
        throughput[tm.name] = sum(st.records_in - seen.get(st.attempt, 0.0) for st in tm.subtasks) / dt
        if tm.cpu_time_s is not None and old.cpu_time_s is not None:
            cpu[tm.name] = max(0.0, tm.cpu_time_s - old.cpu_time_s) / dt
        if tm.cgroup_cpu_s is not None and old.cgroup_cpu_s is not None:
            cgroup_cpu[tm.name] = max(0.0, tm.cgroup_cpu_s - old.cgroup_cpu_s) / dt
        busy[tm.name] = sum(st.busy_ms_per_s for st in tm.subtasks if not math.isnan(st.busy_ms_per_s)) / 1000.0
    src0, src1 = prev.source, cur.source
    if src0 is not None and src1 is not None:
        workload, emitted = (src1.scheduled - src0.scheduled) / dt, (src1.emitted - src0.emitted) / dt
    else:
        workload = emitted = math.nan
    return JobRates(
        t=cur.t, dt=dt, workload=workload, emitted=emitted,
        lag=src1.pending if src1 is not None else math.nan,
        throughput=throughput, cpu=cpu, busy=busy, parallelism=cur.parallelism, status=cur.status,
        cgroup_cpu=cgroup_cpu)
