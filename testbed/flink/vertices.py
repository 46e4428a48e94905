"""Each job's vertices (flink/jobs/) as a per-vertex policy sees them, in one place: which Flink
vertex is which of the policy's operators, which of them may be scaled, which one pays the per-record
cost, and the body of the REST call that sets their parallelism (docs/flink.md#per-vertex-parallelism).
Pure. Flink names a vertex by its chained operators joined by ` -> ` (the Prometheus reporter by the
same with `_` for what a label may not hold), so each vertex is known by its first operator.

WordCount:   source --rebalance--> split --keyBy(word)--> count -> discard
YSB:         source --rebalance--> parse -> filter -> project -> join --keyBy(campaign)--> count -> sink -> discard
Traffic:     source --rebalance--> parse -> filter --keyBy(vehicle)--> speed -> enrich -> sink -> discard

* `source`: the rate schedule's one reader; its maximum parallelism is 1 (one split holding the
  schedule's position), so its rate is the schedule's whatever it is given: never scaled.
* the middle vertex: WordCount's splitter (its own chain: chaining is disabled), YSB's and Traffic's
  parse chain (a new chain after the source); scaled. Their filters drop records inside the chain, so
  the vertex's records out over its records in is its selectivity.
* the keyed vertex: the counter, or the windowed count or speed stage, chained to what follows it at
  the same parallelism (forward edges) up to the discarding sink: one task, scaled as one."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from testbed.flink.metrics import JobReading, TaskReading


@dataclass(frozen=True)
class Vertex:
    name: str  # the policy's name of the vertex (its first operator)
    prefix: str  # the Flink vertex's and task's name starts with this
    operators: Tuple[str, ...]  # the job's operators it runs (chained)
    scalable: bool
    keyed: bool  # its input is keyed (its parallelism divides the key groups)


@dataclass(frozen=True)
class JobVertices:
    """One job's vertices in topological order (the first is the source), its edges, and the vertex
    whose subtasks pay the per-record cost (each carries a TaskManager's rate)."""

    job: str
    vertices: Tuple[Vertex, ...]
    edges: Tuple[Tuple[str, str], ...]
    working: str

    @property
    def scalable(self) -> Tuple[str, ...]:
        return tuple(v.name for v in self.vertices if v.scalable)

    def vertex_of(self, flink_name: str) -> Optional[Vertex]:
        """Which of the job's vertices a Flink vertex or task name is (None: not one of ours). The
        Prometheus reporter writes a task's name with `_` for what a label may not hold (`Source:_source`,
        `count____discard:_Writer`), the REST API as it is (`Source: source`, `count -> discard: Writer`)."""
        name = _label(flink_name)
        return next((v for v in self.vertices if name.startswith(_label(v.prefix))), None)

    def requirements(self, targets: Mapping[str, int]) -> Dict[str, int]:
        """Every vertex's parallelism: the targets of the scalable ones (each must be given), 1 for the rest."""
        scalable = self.scalable
        missing = [name for name in scalable if name not in targets]
        if missing:
            raise KeyError(f"no parallelism for {', '.join(missing)}")
        unknown = [name for name in targets if name not in scalable]
        if unknown:
            raise KeyError(f"not a scalable vertex: {', '.join(unknown)} (scalable: {', '.join(scalable)})")
        for name, n in targets.items():
            if n < 1:
                raise ValueError(f"{name}: parallelism must be >= 1, got {n}")
        return {v.name: int(targets[v.name]) if v.scalable else 1 for v in self.vertices}

    def running(self, reading: JobReading) -> Dict[str, int]:
        """Per vertex of ours, the parallelism it runs at as the REST API shows it (0 while not RUNNING)."""
        out: Dict[str, int] = {}
        for state in reading.vertices:
            v = self.vertex_of(state.name)
            if v is not None:
                out[v.name] = state.parallelism if state.status == "RUNNING" else 0
        return out


def _label(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9:]", "_", name)


SOURCE = Vertex("source", "Source: source", ("source",), scalable=False, keyed=False)
SPLITTER = Vertex("splitter", "split", ("splitter",), scalable=True, keyed=False)
COUNTER = Vertex("counter", "count", ("counter", "sink"), scalable=True, keyed=True)
WORDCOUNT = JobVertices("wordcount", (SOURCE, SPLITTER, COUNTER), (("source", "splitter"), ("splitter", "counter")),
                        working="counter")
YSB = JobVertices("ysb", (SOURCE, Vertex("parse", "parse", ("parse", "filter", "project", "join"), True, False),
                          Vertex("count", "count", ("count", "sink", "discard"), True, True)),
                  (("source", "parse"), ("parse", "count")), working="parse")
TRAFFIC = JobVertices("traffic", (SOURCE, Vertex("parse", "parse", ("parse", "filter"), True, False),
                                  Vertex("speed", "speed", ("speed", "enrich", "sink", "discard"), True, True)),
                      (("source", "parse"), ("parse", "speed")), working="parse")
MAPS: Dict[str, JobVertices] = {m.job: m for m in (WORDCOUNT, YSB, TRAFFIC)}


def of_job(job: str) -> JobVertices:
    """The vertex map of a job (testbed/flink/jobs.py names them)."""
    if job not in MAPS:
        raise KeyError(f"no vertex map for job {job!r} (mapped: {', '.join(MAPS)})")
    return MAPS[job]


def requirements_body(ids: Mapping[str, str], parallelism: Mapping[str, int]) -> Dict[str, dict]:
    """The body of PUT /jobs/:jobid/resource-requirements: per Flink vertex id, the bounds of its
    parallelism. The upper bound is the target; the lower bound is 1, so that the job keeps running
    at what the slots allow while new TaskManagers start (a lower bound raised above the slots there
    are makes Flink stop the job at once and wait for them)."""
    absent = [name for name in parallelism if name not in ids]
    if absent:
        raise KeyError(f"the job has no vertex for {', '.join(absent)} (known: {', '.join(sorted(ids))})")
    return {ids[name]: {"parallelism": {"lowerBound": 1, "upperBound": int(n)}} for name, n in parallelism.items()}


@dataclass(frozen=True)
class SubtaskDelta:
    """One subtask since its attempt was last read: records taken in and sent on, the busy time it
    spent meanwhile, and Flink's busy gauge now."""

    records_in: float
    records_out: float
    busy: float  # busyTimeMsPerSecond now, as a fraction (NaN: not reported)
    useful_s: float  # busy seconds since the last reading of the attempt (NaN: not running)


def task_deltas(job: JobVertices, seen: Mapping[str, TaskReading],
                cur: JobReading) -> Dict[str, Dict[int, SubtaskDelta]]:
    """Per vertex of ours and subtask index, what it did since its attempt was last read (`seen`, per
    attempt id). Records and busy time are the attempt's own counters read together, so their
    differences cover the same span even where a reading missed the subtask; an attempt not seen
    before (the job restarted) counts from 0, as its counters start when it is deployed."""
    out: Dict[str, Dict[int, SubtaskDelta]] = {}
    for tm in cur.taskmanagers:
        for t in tm.tasks:
            v = job.vertex_of(t.task)
            if v is None:
                continue
            old = seen.get(t.attempt)
            records_in = t.records_in - (old.records_in if old is not None else 0.0)
            records_out = t.records_out - (old.records_out if old is not None else 0.0)
            busy_before = old.busy_ms if old is not None and not math.isnan(old.busy_ms) else 0.0
            out.setdefault(v.name, {})[t.subtask] = SubtaskDelta(
                max(0.0, records_in), max(0.0, records_out), t.busy_ms_per_s / 1000.0,
                (t.busy_ms - busy_before) / 1000.0)
    return out


def tasks_of(reading: JobReading) -> Dict[str, TaskReading]:
    """Every subtask the reading has, by attempt id."""
    return {t.attempt: t for tm in reading.taskmanagers for t in tm.tasks}
