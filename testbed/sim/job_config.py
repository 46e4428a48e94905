"""`job.*`: job mode, the Daedalus paper's setting (docs/papers/daedalus.md#simulator): one keyed
stage of n workers that all run the whole pipeline, fed from a source queue, rescaled as a whole by
a stop-the-world restart. Typed here (no heavy imports) so that testbed/config.py can include it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


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
    checkpoint_s: float = 30.0  # a restart replays everything since the last checkpoint
    cpu_noise: float = 0.01  # sd of the per-second CPU reading
    base_latency_ms: float = 250.0  # processing and transport without queueing (Decision)
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
            return "job.initial_parallelism", f"must be in [1, max_scaleout ({self.max_scaleout})], got {self.initial_parallelism}"
        if not 1 <= self.capacity_workers <= self.key_groups:
            return "job.capacity_workers", f"must be in [1, key_groups], got {self.capacity_workers}"
        if not 0 < self.peak_fraction <= 10:
            return "job.peak_fraction", f"must be in (0, 10], got {self.peak_fraction}"
        for key in ("downtime_out_s", "downtime_in_s"):
            v = getattr(self, key)
            if len(v) != 2 or v[0] < 0 or v[1] < v[0]:
                return f"job.{key}", f"must be [low, high] with 0 <= low <= high, got {list(v)}"
        for key in ("checkpoint_s", "latency_samples", "window_s"):
            if not getattr(self, key) > 0:
                return f"job.{key}", f"must be > 0, got {getattr(self, key)}"
        for key in ("cpu_noise", "base_latency_ms"):
            if getattr(self, key) < 0:
                return f"job.{key}", f"must be >= 0, got {getattr(self, key)}"
        return None
