"""Job mode, the Daedalus paper's setting (docs/papers/daedalus.md#simulator): one keyed stage of n
workers that all run the whole pipeline, fed from a source queue, rescaled as a whole by a
stop-the-world restart. `job.*` (JobConfig: the job, on either backend, testbed/sim/job.py in the
simulator) and `backend.live.job.*` (LiveJobConfig: the live job mode's settings,
docs/papers/daedalus.md#live-runtime, testbed/live/job.py). Typed here without heavy imports so that
testbed/config.py can include them.

Time compression (`time_compression`, f): with job mode on the live backend every time in the
config is read as the paper's and divided by f for the run (testbed/live/job_compression.py):
the run's duration, the workload (f seconds of the pattern become one), the job's checkpoint
interval, downtimes and window, Daedalus' loop, horizon, grace, keep rule, RT target, warm-up and
start downtimes, HPA's sync, metric window, stabilisation windows and policy period. f = 6 turns the
paper's 6 h into 60 min (loop 10 s, horizon 150 s, grace 30 s, keep 100 s, RT target 100 s, HPA sync
2.5 s, stabilisation 50 s, checkpoint 5 s)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from testbed.backend_registry import BackendSettings

# backend.flink.parallelism: one parallelism for the job (reactive mode) or one per vertex
REACTIVE, PER_VERTEX = "reactive", "per-vertex"
PARALLELISM_MODES = (REACTIVE, PER_VERTEX)
# job.cpu_reading: a worker's utilisation (busy time) or its TaskManager's cgroup CPU over its limit
CPU_READINGS = ("busy", "cgroup")


@dataclass
class JobConfig:
    enabled: bool = False  # run the job simulator (testbed/sim/job.py) instead of the topology
    keys: int = 100  # distinct keys; their hashes fix the key groups
    key_distribution: str = "uniform"  # uniform | zipf (word frequencies)
    zipf_s: float = 1.0
    key_groups: int = 128  # Flink's max parallelism: key -> key group -> worker kg * n // key_groups
    max_scaleout: int = 18
    initial_parallelism: int = 12  # Decision: every controller takes over a running job of 12 workers
    capacity_workers: int = 12  # rates are normalised so that the peak = peak_fraction x C(capacity_workers)
    peak_fraction: float = 0.9
    downtime_out_s: List[float] = field(default_factory=lambda: [20.0, 40.0])  # true downtime ~U(lo, hi)
    downtime_in_s: List[float] = field(default_factory=lambda: [10.0, 20.0])
    # scale-out on a real engine: the new workers start ~U(lo, hi) s while the old parallelism keeps
    # running, then the job stops for downtime_out_s (Flink: TaskManager start, then a short restart)
    start_delay_s: List[float] = field(default_factory=lambda: [0.0, 0.0])
    checkpoint_s: float = 30.0  # a restart replays everything since the last checkpoint
    cpu_noise: float = 0.01  # sd of the per-second CPU reading
    # the CPU reading as an engine's metric gives it: the mean utilisation over the last cpu_window_s
    # seconds, as of its last update (every cpu_update_s) cpu_lag_s seconds ago, plus cpu_bias (Flink's
    # busy time: a 60 s window updated every 5 s); 1, 1, 0, 0 = the true utilisation of the second
    cpu_window_s: int = 1
    cpu_update_s: int = 1
    cpu_lag_s: float = 0.0
    cpu_bias: float = 0.0
    # what is read: `busy`, the worker's utilisation (the counted work's busy time), or `cgroup`, its
    # TaskManager's whole CPU over its limit: cgroup_overhead of the limit spent besides the counted
    # work at any load (source, splitter, network, checkpoints, GC), the rest in proportion to the
    # utilisation, so that a worker at capacity reads 1 (docs/flink.md#the-cgroup-reading-simulated)
    cpu_reading: str = "busy"
    cgroup_overhead: float = 0.0
    base_latency_ms: float = 250.0  # processing and transport without queueing (Decision)
    # queueing below capacity (docs/papers/daedalus.md#queueing-below-capacity): the job's capacity
    # in each second varies by this coefficient of variation (pauses, throttling, other load), so a
    # backlog forms and drains before saturation; and a record waits batch_wait_ms x the second's
    # utilisation for the records that arrived with it (a sentence's words, a network buffer's flush).
    # 0, 0 = a fluid that queues only above capacity
    service_cv: float = 0.0
    service_period_s: int = 1  # each drawn capacity holds this long (a compressed run: f x the engine's second)
    batch_wait_ms: float = 0.0
    latency_samples: int = 200_000  # about this many items per run are sampled for latency (every N-th)
    window_s: int = 61  # the seconds a controller sees per decision

    def validate(self) -> Optional[Tuple[str, str]]:
        """(key, problem) of the first invalid value, None if all are fine."""
        if self.keys < 1:
            return "job.keys", f"must be >= 1, got {self.keys}"
        if self.key_distribution not in ("uniform", "zipf"):
            return "job.key_distribution", f"must be uniform or zipf, got {self.key_distribution!r}"
        if self.zipf_s < 0:
            return "job.zipf_s", f"must be >= 0, got {self.zipf_s}"
        if self.key_groups < 1:
            return "job.key_groups", f"must be >= 1, got {self.key_groups}"
        if not 1 <= self.max_scaleout <= self.key_groups:
            return "job.max_scaleout", f"must be in [1, key_groups ({self.key_groups})], got {self.max_scaleout}"
        if not 1 <= self.initial_parallelism <= self.max_scaleout:
            return "job.initial_parallelism", (f"must be in [1, max_scaleout ({self.max_scaleout})], got "
                                               f"{self.initial_parallelism}")
        if not 1 <= self.capacity_workers <= self.key_groups:
            return "job.capacity_workers", f"must be in [1, key_groups], got {self.capacity_workers}"
        if not 0 < self.peak_fraction <= 10:
            return "job.peak_fraction", f"must be in (0, 10], got {self.peak_fraction}"
        for key in ("downtime_out_s", "downtime_in_s", "start_delay_s"):
            v = getattr(self, key)
            if len(v) != 2 or v[0] < 0 or v[1] < v[0]:
                return f"job.{key}", f"must be [low, high] with 0 <= low <= high, got {list(v)}"
        for key in ("checkpoint_s", "latency_samples", "window_s", "service_period_s", "cpu_window_s", "cpu_update_s"):
            if not getattr(self, key) > 0:
                return f"job.{key}", f"must be > 0, got {getattr(self, key)}"
        if not -1.0 <= self.cpu_bias <= 1.0:
            return "job.cpu_bias", f"must be in [-1, 1], got {self.cpu_bias}"
        problem = self._reading_problem()
        if problem is not None:
            return problem
        if self.service_cv > 1.0:
            return "job.service_cv", f"must be <= 1, got {self.service_cv}"
        for key in ("cpu_noise", "base_latency_ms", "cpu_lag_s", "service_cv", "batch_wait_ms"):
            if getattr(self, key) < 0:
                return f"job.{key}", f"must be >= 0, got {getattr(self, key)}"
        return None

    def _reading_problem(self) -> Optional[Tuple[str, str]]:
        if self.cpu_reading not in CPU_READINGS:
            return "job.cpu_reading", f"must be one of {', '.join(CPU_READINGS)}, got {self.cpu_reading!r}"
        if not 0.0 <= self.cgroup_overhead < 1.0:
            return "job.cgroup_overhead", f"must be in [0, 1), got {self.cgroup_overhead}"
        if self.cgroup_overhead > 0 and self.cpu_reading != "cgroup":
            return "job.cgroup_overhead", f"is the cgroup reading's (job.cpu_reading=cgroup), got cpu_reading " \
                                          f"{self.cpu_reading!r}"
        return None


@dataclass
class LiveJobConfig:
    image: str = "testbed-job:latest"  # infra/images.sh builds it (operators/keyed_worker.py)
    cpus: float = 0.1  # each worker's CPU quota (docker --cpus)
    cpu_budget: float = 1.5  # cores the workers may take together at job.max_scaleout (the rest: broker, router)
    burn_ms: float = 0.6  # CPU time burnt per item: with the worker's own per-item cost, worker_rate at 0.1 core
    worker_rate: float = 150.0  # items/s one worker carries at its quota (measured 150-152 at 0.1 core, 0.6 ms)
    time_compression: float = 6.0  # f: every configured time is the paper's, divided by f
    prefetch: int = 2000  # unacknowledged items per worker: must hold a checkpoint's worth
    # items forwarded but not processed, at most (the job's network buffers): this many seconds of the
    # deployment's nominal rate (worker_rate x n); it must cover the feedback delay of the bound (the
    # quota's 100 ms CFS period, the workers' 0.1 s count flush), else it caps the throughput
    inflight_s: float = 0.5
    latency_every: int = 5  # every n-th item's latency is recorded
    start_timeout_s: float = 180.0  # a worker container must be consuming within this (loaded machine)
    stop_timeout_s: float = 60.0  # workers must answer a stop-the-world or the final checkpoint within this
    # a worker container that exits during the run is replaced and the job restarts from its checkpoints
    # (testbed/live/job.py); after this many replacements the next exit ends the run incomplete
    max_recoveries: int = 3

    def validate(self, max_scaleout: int) -> Optional[Tuple[str, str]]:
        """(key, problem) of the first invalid value, None if all are fine."""
        for key in ("cpus", "cpu_budget", "worker_rate", "inflight_s", "start_timeout_s", "stop_timeout_s"):
            if not getattr(self, key) > 0:
                return f"backend.live.job.{key}", f"must be > 0, got {getattr(self, key)}"
        if self.burn_ms < 0:
            return "backend.live.job.burn_ms", f"must be >= 0, got {self.burn_ms}"
        if self.time_compression < 1:
            return "backend.live.job.time_compression", f"must be >= 1, got {self.time_compression}"
        for key in ("prefetch", "latency_every"):
            if getattr(self, key) < 1:
                return f"backend.live.job.{key}", f"must be >= 1, got {getattr(self, key)}"
        if self.max_recoveries < 0:
            return "backend.live.job.max_recoveries", f"must be >= 0, got {self.max_recoveries}"
        if self.cpus * max_scaleout > self.cpu_budget + 1e-9:
            return ("backend.live.job.cpus", f"{self.cpus:g} cores x job.max_scaleout {max_scaleout} = "
                    f"{self.cpus * max_scaleout:g} exceeds backend.live.job.cpu_budget ({self.cpu_budget:g})")
        if not self.image:
            return "backend.live.job.image", "must name an image"
        return None


@dataclass
class FlinkJobConfig(BackendSettings):
    """Job mode on a real Apache Flink (`backend=flink`, testbed/live/flink_job.py): one TaskManager of
    one slot per worker, in reactive mode or, per vertex, under the adaptive scheduler (`parallelism`).
    `settings` are the cluster's (testbed/flink/settings.py, docs/flink.md#settings), validated by name
    when the config is loaded. `jobs` says which job each workload runs on (a workload without one is
    refused before anything starts), `tm_rates` what one TaskManager carries of a job other than
    `tm_rate` says."""

    time_compression: float = 6.0  # f, as backend.live.job.time_compression
    # sentences/s one TaskManager counts at a busy time of 1 (measured: docs/flink.md): the workload is
    # normalised so that its peak is job.peak_fraction x job.capacity_workers x tm_rate
    tm_rate: float = 60.0
    drain_timeout_s: float = 120.0  # after the run, what is due must be counted within this (else: pending)
    # a TaskManager lost during the run (exited, or dropped by the JobManager) is replaced
    # (testbed/live/flink_job.py); after this many replacements the next loss ends the run incomplete
    max_recoveries: int = 3
    # how a decision reaches the job: `reactive`, one parallelism for every vertex (TaskManagers added
    # or stopped); `per-vertex`, each vertex's own (the adaptive scheduler's resource requirements), for
    # a policy that decides per vertex (docs/flink.md#per-vertex-parallelism)
    parallelism: str = REACTIVE
    settings: Dict[str, Any] = field(default_factory=dict)
    jobs: Dict[str, str] = field(default_factory=dict)  # workload (pattern name) -> wordcount | ysb | traffic
    tm_rates: Dict[str, float] = field(default_factory=dict)  # job -> source records/s per TaskManager

    def job_for(self, workload: str) -> str:
        """The job a workload runs on; KeyError if it has none (validate_workload says so first)."""
        return self.jobs[workload]

    def rate_of(self, job: str) -> float:
        """Source records/s one TaskManager of this job counts at a busy time of 1."""
        return float(self.tm_rates.get(job, self.tm_rate))

    def validate_workload(self, workload: str) -> Optional[Tuple[str, str]]:
        if workload not in self.jobs:
            known = ", ".join(f"{w}={j}" for w, j in sorted(self.jobs.items())) or "none"
            return "backend.flink.jobs", (f"no Flink job for workload {workload!r}: add "
                                          f"+backend.flink.jobs.{workload}=wordcount|ysb|traffic (known: {known})")
        from testbed.flink.vertices import MAPS

        if self.parallelism == PER_VERTEX and self.jobs[workload] not in MAPS:
            return "backend.flink.parallelism", (f"per-vertex parallelism needs the vertex map of job "
                                                 f"{self.jobs[workload]!r} (testbed/flink/vertices.py; mapped: "
                                                 f"{', '.join(MAPS)}); workload {workload!r} runs on it")
        return None

    def validate(self) -> Optional[Tuple[str, str]]:
        """(key, problem) of the first invalid value, None if all are fine."""
        problem = self._validate_jobs()
        if problem is not None:
            return problem
        if self.time_compression < 1:
            return "backend.flink.time_compression", f"must be >= 1, got {self.time_compression}"
        for key in ("tm_rate", "drain_timeout_s"):
            if not getattr(self, key) > 0:
                return f"backend.flink.{key}", f"must be > 0, got {getattr(self, key)}"
        if self.max_recoveries < 0:
            return "backend.flink.max_recoveries", f"must be >= 0, got {self.max_recoveries}"
        if self.parallelism not in PARALLELISM_MODES:
            modes = ", ".join(PARALLELISM_MODES)
            return "backend.flink.parallelism", f"must be one of {modes}, got {self.parallelism!r}"
        if "scheduler" in self.settings:
            return "backend.flink.settings.scheduler", ("follows backend.flink.parallelism (reactive: reactive, "
                                                        "per-vertex: adaptive); set that instead")
        from testbed.flink.settings import FlinkSettingsError, from_mapping

        try:
            from_mapping(self.settings)
        except FlinkSettingsError as exc:
            return f"backend.flink.settings.{exc.key}", str(exc).split(": ", 1)[1]
        return None

    def _validate_jobs(self) -> Optional[Tuple[str, str]]:
        from testbed.flink.jobs import JOB_NAMES

        if "job" in self.settings:
            return "backend.flink.settings.job", "the job comes from backend.flink.jobs (one per workload)"
        for workload, job in self.jobs.items():
            if job not in JOB_NAMES:
                return f"backend.flink.jobs.{workload}", f"must be one of {', '.join(JOB_NAMES)}, got {job!r}"
        for job, rate in self.tm_rates.items():
            if job not in JOB_NAMES:
                return f"backend.flink.tm_rates.{job}", f"not a job (known: {', '.join(JOB_NAMES)})"
            if not (isinstance(rate, (int, float)) and rate > 0):
                return f"backend.flink.tm_rates.{job}", f"must be > 0, got {rate!r}"
        return None
