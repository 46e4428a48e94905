"""What a whole-job autoscaler sees in job mode (docs/papers/daedalus.md#mapping): the job's
window of 1 s samples. testbed/job/inputs.py builds it from every engine's series; the job-mode
controllers (Daedalus, HPA, DS2, ...) read it. Per-vertex mode (an engine that sets each vertex's
parallelism) adds each vertex's window: `VertexSnapshot`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

import numpy as np

JOB_OPERATOR = "job"  # the operator name of job-mode actions (all workers run the whole pipeline)


@dataclass(frozen=True)
class JobSnapshot:
    t: float  # end of the newest second of the window (s since the run's start)
    parallelism: int  # workers of the current deployment (after a decided rescale: the new count)
    max_scaleout: int
    checkpoint_s: float  # the runtime's checkpoint interval
    lag: float  # items waiting at the source now (consumer lag)
    seconds: np.ndarray  # end time of each second of the window, oldest first
    workload: np.ndarray  # items that arrived at the source per second
    throughput: Mapping[str, np.ndarray]  # items processed per second, per worker of the deployment
    cpu: Mapping[str, np.ndarray]  # CPU as a fraction of one worker's capacity per second (NaN: not running)
    uptime: np.ndarray  # job uptime at each second (0 while the job restarts)
    ready: Mapping[str, bool] = field(default_factory=dict)  # per worker now (False: starting)

    def total_throughput(self) -> np.ndarray:
        if not self.throughput:
            return np.zeros(len(self.seconds))
        return np.sum([v for v in self.throughput.values()], axis=0)


@dataclass(frozen=True)
class VertexSeries:
    """One vertex of the job over the window (per-vertex mode): per row (a run second; its real span
    is the snapshot's `spans`) and subtask slot (max scale-out wide) the records it took in and sent
    on, the engine's busy gauge and the useful time within the row (NaN: that subtask did not run)."""

    name: str
    parallelism: int  # the subtasks it runs now, as read back from the engine
    scalable: bool
    keyed: bool  # a keyed input: its parallelism is aligned to the key groups
    records_in: np.ndarray  # (rows, slots)
    records_out: np.ndarray  # (rows, slots): records it sent downstream
    busy: np.ndarray  # (rows, slots): the busy fraction the engine reports (Flink: a trailing average)
    # (rows, slots): seconds the subtask spent processing within the row, from a counter read with
    # its records (not clipped: a sum over rows telescopes to the difference of the window's ends)
    useful: np.ndarray


@dataclass(frozen=True)
class VertexSnapshot:
    """What a per-vertex autoscaler sees (testbed/flink/vertices.py names the vertices): the job's
    window and each vertex's. The source's arrivals and lag are the job's."""

    job: JobSnapshot
    vertices: Tuple[VertexSeries, ...]  # topological order; the first is the source
    edges: Tuple[Tuple[str, str], ...]
    spans: np.ndarray  # real seconds each row covers (a late reading makes a longer row, the next shorter)

    def vertex(self, name: str) -> VertexSeries:
        return next(v for v in self.vertices if v.name == name)

    def parallelism(self) -> Dict[str, int]:
        return {v.name: v.parallelism for v in self.vertices}
