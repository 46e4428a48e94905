"""The load ramp (testbed/fidelity/ramp.py) on the simulator's job model: one worker, never
rescaled, the ramp's rates in the job's own time (no compression), the model's settings from the
evaluation `daedalus_flink` on the simulator plus the given `job.*` overrides."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Sequence

import numpy as np

from testbed.config import ExperimentConfig
from testbed.fidelity.evaluation import compose_experiment
from testbed.fidelity.ramp import BandLatency, RampRun, RampSpec, intervals_from_samples, per_second_rates
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


def ramp_config(spec: RampSpec, capacity: float, extra: Sequence[str] = ()) -> ExperimentConfig:
    """The simulator's config of the ramp (composed once; `simulate` may vary its `job` settings)."""
    return compose_experiment(ramp_overrides(spec, capacity, extra))


def simulate(spec: RampSpec, cfg: ExperimentConfig, seed: int = 1) -> RampRun:
    """The ramp simulated once: per-second latency of the sampled items, the model's capacity."""
    sim = JobSimulation(cfg, StaticNPolicy(StaticNParams(1)), RampWorkload(per_second_rates(spec)), seed)
    res = sim.run()
    lat = res.tables["latency"]
    return RampRun(spec, intervals_from_samples(lat["t_s"], lat["latency_ms"]),
                   {"capacity": sim.capacity(1), "seed": seed})


def simulated_bands(spec: RampSpec, cfg: ExperimentConfig, seeds: Sequence[int] = (1, 2, 3)) -> List[BandLatency]:
    """Latency per band averaged over a few seeds (the capacity's variation is drawn)."""
    runs = [simulate(spec, cfg, s).bands() for s in seeds]
    return [BandLatency(b.fraction, float(np.mean([r[i].mean_ms for r in runs])),
                        float(np.mean([r[i].p95_ms for r in runs])), b.intervals) for i, b in enumerate(runs[0])]


def with_job(cfg: ExperimentConfig, **job: Any) -> ExperimentConfig:
    """A copy of cfg with these `job.*` settings."""
    return dataclasses.replace(cfg, job=dataclasses.replace(cfg.job, **job))
