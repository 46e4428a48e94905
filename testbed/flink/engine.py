"""What a job-mode run asks of a Flink cluster (reactive mode, or the adaptive scheduler with each
vertex's parallelism set), so that the job loop's Flink engine
(testbed/live/flink_job_engine.py) runs against a real cluster or, in unit tests, against a fake one:
start at n TaskManagers, read the job, add or remove one TaskManager, which are ours, which exited
without being asked, stop everything. The clock comes from the job loop (testbed/job/engine.py)."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Protocol

from testbed.flink.cluster import FlinkCluster, last_error
from testbed.flink.metrics import JobReading

JOBMANAGER = "jobmanager"


class Engine(Protocol):
    """A Flink job on TaskManagers of one slot: in reactive mode its parallelism is their number, under
    the adaptive scheduler each vertex's is what its requirement and the slots allow."""

    def start(self, n: int) -> None:
        """The JobManager with the job and n TaskManagers (returns before they have registered)."""

    def read(self) -> JobReading: ...

    def require(self, parallelism: Mapping[str, int]) -> None:
        """Adaptive scheduler: sets each vertex's parallelism (its resource requirements)."""

    def add(self) -> str:
        """Starts one TaskManager; returns its name (its resource id)."""

    def remove(self, name: str, mode: str) -> None:
        """Stops a TaskManager (`graceful`: SIGTERM, `kill`: SIGKILL) and forgets it."""

    def taskmanagers(self) -> List[str]:
        """Ours, started and not removed, oldest first (dead ones included until removed)."""

    def exited(self) -> Dict[str, Optional[int]]:
        """Processes (`jobmanager` or a TaskManager) that exited without being asked: their exit status."""

    def log_tail(self, name: str) -> str:
        """The last error line of a process's log (for a reason)."""

    def start_failure(self, status: str) -> Optional[str]:
        """Why the job will not start as the JobManager says it (its application failed, the job is
        FAILED, or it keeps failing before it ever ran); None while nothing says so."""

    def record(self) -> dict:
        """What the run's manifest records about the engine."""

    def close(self) -> None:
        """Stops every process (also after an interrupt)."""


class ClusterEngine:
    """The Engine of a real FlinkCluster (testbed/flink/cluster.py)."""

    def __init__(self, cluster: FlinkCluster):
        self.cluster = cluster

    def start(self, n: int) -> None:
        self.cluster.start(n)
        for _ in range(n):
            self.cluster.add_taskmanager()

    def read(self) -> JobReading:
        return self.cluster.read()

    def require(self, parallelism: Mapping[str, int]) -> None:
        self.cluster.require(parallelism)

    def add(self) -> str:
        return self.cluster.add_taskmanager()

    def remove(self, name: str, mode: str) -> None:
        self.cluster.stop_taskmanager(name, mode)

    def taskmanagers(self) -> List[str]:
        return list(self.cluster.taskmanagers)

    def exited(self) -> Dict[str, Optional[int]]:
        procs = dict(self.cluster.taskmanagers)
        if self.cluster.jobmanager is not None:
            procs[JOBMANAGER] = self.cluster.jobmanager
        return {name: p.popen.returncode for name, p in procs.items() if not p.alive()}

    def log_tail(self, name: str) -> str:
        proc = self.cluster.jobmanager if name == JOBMANAGER else self.cluster.taskmanagers.get(name)
        return last_error(proc.log) if proc is not None else ""

    def start_failure(self, status: str) -> Optional[str]:
        return self.cluster.start_failure(status)

    def record(self) -> dict:
        record = self.cluster.record()
        procs = [p for p in (self.cluster.jobmanager, *self.cluster.taskmanagers.values()) if p is not None]
        record["memory_mb"] = {p.name: mb for p in procs if (mb := p.rss_mb()) is not None}
        return record

    def close(self) -> None:
        self.cluster.close()
