"""The simulator's settings (`backend=sim`, testbed/sim): the keys that sit directly under `backend`,
which every run's `backend` node has (profiles and evaluations set them there)."""
from __future__ import annotations

from dataclasses import dataclass, field

from testbed.backend_registry import BackendSettings
from testbed.emulation import EmulationConfig


@dataclass
class SimSettings(BackendSettings):
    step_ms: float = 480.0  # simulation step; one tick by default
    hop_latency_ms: float = 5.0  # broker hop from the upstream send to the queue
    cpu_contention: bool = False  # slow service when busy slots need more cores than the host has
    exact: bool = False  # per-item reference model instead of the cohort model (slow; validation)
    # cores all logical hosts of a run share (the live machine's; 0: none). When the busy slots of
    # every instance need more, each runs slower by demand / shared_cores. Cohort model only; with
    # cpu_contention both apply, per host first (docs/architecture.md#shared-cores)
    shared_cores: float = 0.0
    # other processes' runnable threads competing for the shared cores (0: none): each wants a core,
    # and the scheduler shares the cores among them and the run's busy slots alike
    # (docs/architecture.md#shared-cores). Needs shared_cores > 0
    competing_threads: float = 0.0
    # inter-host delay and availability (ODP experiments); enabled: the per-item model with per-instance queues
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
