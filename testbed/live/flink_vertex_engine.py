"""Per-vertex parallelism on Flink (docs/flink.md#per-vertex-parallelism): the adaptive scheduler, not
reactive mode, with each scalable vertex's parallelism set through its resource requirements
(`PUT /jobs/:jobid/resource-requirements`), on TaskManagers of one slot, as many as the largest vertex
needs. What each vertex runs at is read back from the REST API and is what the policy sees.

* **A rescale** starts the TaskManagers the largest vertex needs beyond those there are, then sets
  the requirements; the scheduler restarts the job from its last checkpoint once the slots are there.
  A scale-in lowers the requirements first; the TaskManagers left without a task are stopped once the
  job runs at the new parallelism (stopping one that still runs a task would fail the job over).
* **Done** when every vertex runs at its requirement with every one of our TaskManagers registered;
  else the loop gives the change up at its bound, as in reactive mode.
* **The rows** stay per TaskManager (the counter's subtask on it) for the tables; beside them the
  engine keeps per vertex and subtask its records in and out, busy gauge and useful time (from the
  attempt's accumulated busy time), and each row's real span: the policy's input."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from testbed.flink import vertices as vx
from testbed.flink.metrics import JobReading, TaskReading
from testbed.job.engine import Second
from testbed.live.flink_job_engine import FlinkJobEngine
from testbed.policies.job_inputs import JobSnapshot, VertexSeries, VertexSnapshot

# how a per-vertex run's manifest names its mode (details.parallelism)
MODE = {"mode": "per-vertex", "scheduler": "adaptive"}


class FlinkVertexEngine(FlinkJobEngine):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.map = vx.of_job(self.settings.job)  # the job's vertices
        self.required: Dict[str, int] = {}  # the requirement in force per scalable vertex
        self.runs: Dict[str, int] = {}  # per vertex, what it last ran at (while running)
        self.rows: List[Dict[str, Dict[int, vx.SubtaskDelta]]] = []  # per run second
        self.spans: List[float] = []  # per run second, the real seconds between its readings
        self.seen: Dict[str, TaskReading] = {}  # every subtask attempt as last read
        self.timeline: List[Dict[str, Any]] = []  # every change of what is required or runs

    def start(self, n: int) -> None:
        super().start(n)
        self.required = {name: n for name in self.map.scalable}
        assert self.cur is not None
        self.seen = vx.tasks_of(self.cur)
        self._note(0.0, self.cur)

    def scalable(self) -> Tuple[str, ...]:
        return self.map.scalable

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, k: int) -> Optional[Second]:
        prev, cur = self.prev, self.cur
        assert prev is not None and cur is not None
        self.rows.append(vx.task_deltas(self.map, self.seen, cur))
        self.seen.update(vx.tasks_of(cur))
        self.spans.append(cur.t - prev.t)
        self._note(k + 1.0, cur)
        if self.runs_as_deployed(cur):
            self._release_idle(cur)
        return super().measure(k)

    def _note(self, t: float, cur: JobReading) -> None:
        """Remembers what each vertex runs at, and a timeline row when that or the requirement changed."""
        running = self.map.running(cur)
        if cur.status == "RUNNING":
            self.runs.update({name: n for name, n in running.items() if n > 0})
        row = {"required": dict(self.required), "running": {name: running.get(name, 0) for name in self.required}}
        if not self.timeline or {k: v for k, v in self.timeline[-1].items() if k != "t_s"} != row:
            self.timeline.append({"t_s": t, **row})

    def runs_as_deployed(self, cur: JobReading) -> bool:
        """Every scalable vertex runs at its requirement."""
        running = self.map.running(cur)
        return cur.status == "RUNNING" and all(running.get(name) == n for name, n in self.required.items())

    def running(self, cur: JobReading) -> int:
        """The slots the job runs in: its largest vertex's parallelism."""
        return min(max(self.map.running(cur).values(), default=0), self.n) if cur.status == "RUNNING" else 0

    def settled(self, target: int) -> bool:
        assert self.cur is not None
        return (self.runs_as_deployed(self.cur) and len(self.workers) == target
                and set(self.workers) <= set(self.cur.registered))

    # -- changing --------------------------------------------------------------------------------
    def rescale_vertices(self, k: int, targets: Dict[str, int]) -> Optional[int]:
        n, t, slots = self.n, float(k + 1), max(targets.values())
        change = ", ".join(f"{name} {self.runs.get(name, 0)} -> {targets[name]}" for name in self.map.scalable)
        started = f"{slots - n} TaskManager(s) started first" if slots > n else (
            f"{n - slots} TaskManager(s) stopped once idle" if slots < n else "the TaskManagers stay")
        self.ledger.record(t, "restart", f"adaptive rescale {change}: resource requirements set, {started}; "
                                         f"the job restarts from its last checkpoint")
        row = self.ledger.open_rescale(t, n, slots, float(self.lag), self._capacity(self.runs),
                                       self._capacity(targets))
        for _ in range(n, slots):
            name = self.engine.add()
            self.started_at[name], self.ready_from[name] = self.now(), math.inf  # until the job runs with it
        self.engine.require(self.map.requirements(targets))
        self.required = dict(targets)
        self.n = len(self.workers)
        return row

    def _capacity(self, parallelism: Dict[str, int]) -> float:
        """Source records/s the working vertex's subtasks carry (each a TaskManager's rate: the per-record
        cost is paid there)."""
        return parallelism.get(self.map.working, 0) * self.tm_rate

    def _release_idle(self, cur: JobReading) -> None:
        """Stops our TaskManagers beyond the largest requirement that run no task, newest first."""
        surplus = len(self.workers) - max(self.required.values())
        busy = {tm.name for tm in cur.taskmanagers if tm.tasks}
        seen = {tm.name for tm in cur.taskmanagers}
        for name in reversed(list(self.workers)):
            if surplus <= 0:
                break
            if name in seen and name not in busy:
                self.engine.remove(name, self.settings.stop_mode)
                self.ready_from.pop(name, None)
                surplus -= 1
        self.n = len(self.workers)

    # -- the policy's input ----------------------------------------------------------------------
    def vertex_snapshot(self, k: int, job: JobSnapshot) -> VertexSnapshot:
        lo = max(0, k + 1 - len(job.seconds))
        rows = self.rows[lo:k + 1]
        series = tuple(self._series(v, rows) for v in self.map.vertices)
        return VertexSnapshot(job, series, self.map.edges, np.asarray(self.spans[lo:k + 1], dtype=float))

    def _series(self, v: vx.Vertex, rows: List[Dict[str, Dict[int, vx.SubtaskDelta]]]) -> VertexSeries:
        shape = (len(rows), self.top)
        records_in, records_out = np.zeros(shape), np.zeros(shape)
        busy, useful = np.full(shape, np.nan), np.full(shape, np.nan)
        for i, row in enumerate(rows):
            for j, d in row.get(v.name, {}).items():
                if j < self.top:
                    records_in[i, j], records_out[i, j] = d.records_in, d.records_out
                    busy[i, j], useful[i, j] = d.busy, d.useful_s
        return VertexSeries(v.name, self.runs.get(v.name, 1), v.scalable, v.keyed, records_in, records_out, busy,
                            useful)

    def mode_record(self) -> Dict[str, Any]:
        """What the manifest says of the mode: the vertices, what was required and what ran."""
        roles = {v.name: {"flink_vertex": v.prefix, "operators": list(v.operators), "scalable": v.scalable}
                 for v in self.map.vertices}
        return {**MODE, "vertices": roles, "timeline": self.timeline}
