"""`backend.live.job.*`: the live job mode's settings (docs/papers/daedalus.md#live-runtime). Typed
here without heavy imports so that testbed/config.py can include it.

Time compression (`time_compression`, f): with job mode on the live backend every time in the
config is read as the paper's and divided by f for the run (testbed/live/job_compression.py):
the run's duration, the workload (f seconds of the pattern become one), the job's checkpoint
interval, downtimes and window, Daedalus' loop, horizon, grace, keep rule, RT target, warm-up and
start downtimes, HPA's sync, metric window, stabilisation windows and policy period. f = 6 turns the
paper's 6 h into 60 min (loop 10 s, horizon 150 s, grace 30 s, keep 100 s, RT target 100 s, HPA sync
2.5 s, stabilisation 50 s, checkpoint 5 s)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


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
