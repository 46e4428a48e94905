"""The simulator (`backend=sim`, testbed/sim): the time-stepped cohort model, or the per-item models
(`exact`, `emulation`), in operator mode; the job model in job mode. Its keys sit directly under
`backend` (they did before backends were registered, and profiles and evaluations set them there);
they are checked on every run, as every run's node has them and the live backend reads the emulated
network's."""
from __future__ import annotations

import math
from typing import Any

from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, RunInputs, register_backend
from testbed.emulation import validate_emulation
from testbed.run_result import RunResult
from testbed.sim_config import SimSettings

__all__ = ["SimSettings", "Simulator"]


@register_backend("sim", SimSettings, key="")
class Simulator(Backend):
    def validate(self, cfg: Any) -> None:
        from testbed.config import validate_cores

        backend = cfg.backend
        if not backend.step_ms > 0:
            raise ConfigError("backend.step_ms", f"must be > 0, got {backend.step_ms}")
        if backend.hop_latency_ms < 0:
            raise ConfigError("backend.hop_latency_ms", "must be >= 0")
        cores = validate_cores("backend.shared_cores", backend.shared_cores)
        _check_shared_cores(cores, backend, cfg.job.enabled and backend.name == self.name)
        _check_competing(backend.competing_threads, cores)
        problem = validate_emulation(backend.emulation)
        if problem is not None:
            raise ConfigError(*problem)

    def run(self, run: RunInputs) -> RunResult:
        if run.mode == "job":  # the Daedalus paper's keyed job (testbed/sim/job.py)
            from testbed.sim.job import JobSimulation

            return JobSimulation(run.cfg, run.policy, run.pattern, run.seed).run()
        from testbed.sim.simulator import Simulation

        return Simulation(run.cfg, run.policy, run.pattern, run.seed, run.btu_minutes).run()


def _check_competing(threads: float, cores: float) -> None:
    """backend.competing_threads compete for the shared cores, so they need some."""
    if not 0 <= threads < math.inf:
        raise ConfigError("backend.competing_threads", f"must be finite and >= 0, got {threads:g}")
    if threads > 0 and cores == 0:
        raise ConfigError("backend.competing_threads", "competes for the shared cores: set backend.shared_cores > 0")


def _check_shared_cores(cores: float, backend: Any, job_model: bool) -> None:
    """backend.shared_cores > 0 only in the cohort model: the per-item models (backend.exact and
    backend.emulation) and job mode's model do not share cores, so it is rejected rather than
    ignored. The live backend ignores it: it describes the live machine."""
    if cores > 0 and backend.exact:
        raise ConfigError("backend.shared_cores", "the per-item model (backend.exact=true) does not share "
                                                  "cores between hosts: set backend.shared_cores=0 or exact=false")
    if cores > 0 and backend.emulation.enabled:
        raise ConfigError("backend.shared_cores", "the emulated network (backend.emulation.enabled=true) runs the "
                                                  "per-item model, which does not share cores between hosts: set "
                                                  "backend.shared_cores=0")
    if cores > 0 and job_model:
        raise ConfigError("backend.shared_cores", "job mode's simulator (job.enabled=true) does not share cores "
                                                  "between hosts: set backend.shared_cores=0")
