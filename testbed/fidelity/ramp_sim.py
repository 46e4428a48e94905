"""The load ramp (testbed/fidelity/ramp.py) on the simulator's job model: one worker, never
rescaled, the ramp's rates in the job's own time (no compression), the model's settings from the
evaluation `daedalus_flink` on the simulator plus the given `job.*` overrides."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from testbed.fidelity.evaluation import compose_experiment
from testbed.fidelity.ramp import RampRun, RampSpec, intervals_from_samples, per_second_rates
from testbed.policies.static_n import StaticNParams, StaticNPolicy
from testbed.sim.job import JobSimulation


@dataclass
class RampWorkload:
    """The ramp as a job-mode workload (the job model reads `rates`, items/s per second)."""

    rates: np.ndarray


def ramp_overrides(spec: RampSpec, capacity: float, extra: Sequence[str] = ()) -> List[str]:
    """One worker of `capacity` items/s: the model normalises its capacity so that the peak rate is
    job.peak_fraction x C(1)."""
    peak = max(spec.fractions) * spec.capacity
    return ["evaluation=daedalus_flink", "backend=sim", "job.max_scaleout=1", "job.initial_parallelism=1",
            "job.capacity_workers=1", f"job.peak_fraction={peak / capacity!r}",
            f"duration_min={spec.duration_s / 60.0!r}", "job.latency_samples=50000", *extra]


def simulate(spec: RampSpec, capacity: float, extra: Sequence[str] = (), seed: int = 1) -> RampRun:
    """The ramp simulated once: per-second latency of the sampled items, the model's capacity."""
    cfg = compose_experiment(ramp_overrides(spec, capacity, extra))
    sim = JobSimulation(cfg, StaticNPolicy(StaticNParams(1)), RampWorkload(per_second_rates(spec)), seed)
    res = sim.run()
    lat = res.tables["latency"]
    return RampRun(spec, intervals_from_samples(lat["t_s"], lat["latency_ms"]),
                   {"capacity": sim.capacity(1), "seed": seed, "overrides": list(extra)})
