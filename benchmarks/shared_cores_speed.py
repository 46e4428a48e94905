"""Speed of a default simulated run (backend.shared_cores off), for comparing two trees:

    PYTHONPATH=<tree> .venv/bin/python benchmarks/shared_cores_speed.py [overrides...]

prints the best of 5 wall times (after a warm-up run that compiles the model). Run it on the tree
before and after a change, interleaved, and divide. Extra arguments are config overrides (e.g.
backend.shared_cores=2 to time the shared-CPU path)."""
from __future__ import annotations

import sys
import time

from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
from testbed.sim.simulator import Simulation
from tests.conftest import compose_config

OVERRIDES = ("reps=1", "policy=threshold", "profile=paper", "pattern=two_level", "duration_min=60")


def once(extra) -> float:
    cfg = compose_config(*OVERRIDES, *extra)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    pattern = build_pattern(run_cfg.pattern, cfg.seed)
    t = time.perf_counter()
    Simulation(run_cfg, policy_for(run_cfg), pattern, 7, spec.btu_minutes).run()
    return time.perf_counter() - t


if __name__ == "__main__":
    extra = sys.argv[1:]
    once(extra)
    print(f"{min(once(extra) for _ in range(5)):.4f}")
