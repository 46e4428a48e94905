"""Speed and memory of the simulated testbed on this machine (`make bench`).

Prints: the wall time of one 120-minute run (simulation and event-log writing apart), the same run
on the exact per-item model as the in-run baseline (ratio), the whole 48-run paper matrix
(4 patterns x 4 configurations x 3 repetitions) over all cores, and the peak memory of one process.
Targets (issue 2): one run <= 2 s, the matrix <= 60 s on 2 cores, peak memory <= 1 GiB.
"""
from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hydra import compose, initialize_config_dir  # noqa: E402

from testbed.config import CONF_DIR, register, to_typed, validate  # noqa: E402
from testbed.eventlog import EventLog  # noqa: E402
from testbed.experiment import build_pattern, config_for, plan_runs, run_experiment  # noqa: E402
from testbed.experiment import policy_for  # noqa: E402
from testbed.sim.simulator import Simulation  # noqa: E402

PATTERNS = ("stepwise", "two_level", "random_walk_1", "random_walk_2")


def config(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


def one_run(out: Path, *overrides: str):
    cfg = config("reps=1", f"out={out}", *overrides)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    start = time.perf_counter()
    pattern = build_pattern(run_cfg.pattern, cfg.seed)
    result = Simulation(run_cfg, policy_for(run_cfg), pattern, spec.seed, spec.btu_minutes).run()
    simulated = time.perf_counter() - start
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    log = EventLog(spec.run_dir)
    for table, columns in sorted(result.tables.items()):
        log.write(table, columns)
    total = time.perf_counter() - start
    return simulated, total, len(result.tables["samples"]["t_s"])


def peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0  # Linux reports KiB


def main() -> None:
    register()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
        one_run(out / "warm", "policy=btu", "duration_min=5")  # imports, caches
        rows = []
        for policy in ("policy=btu", "policy=threshold"):
            best = min((one_run(out / "one", policy) for _ in range(3)), key=lambda r: r[1])
            rows.append((policy, *best))
            print(f"one 120-min run, stepwise, {policy:<17} {best[1]:6.2f} s wall "
                  f"(simulation {best[0]:.2f} s, event log {best[1] - best[0]:.2f} s, {best[2]} samples)   target <= 2 s")
        exact = one_run(out / "exact", "policy=btu", "backend.exact=true")
        print(f"same run on the exact per-item model (baseline)   {exact[1]:6.2f} s wall "
              f"-> cohort model is {exact[1] / rows[0][2]:.1f}x faster")

        start = time.perf_counter()
        runs = 0
        for pattern in PATTERNS:
            cfg = config(f"pattern={pattern}", f"out={out / 'matrix'}", "workers=0", "summary=false")
            runs += len(run_experiment(cfg))
        matrix = time.perf_counter() - start
        print(f"paper matrix: {runs} runs x 120 min on {os.cpu_count()} cores     {matrix:6.1f} s wall "
              f"({matrix / runs:.2f} s per run)   target <= 60 s")
        print(f"peak memory: this process {peak_mib(resource.RUSAGE_SELF):.0f} MiB, "
              f"largest worker {peak_mib(resource.RUSAGE_CHILDREN):.0f} MiB   target <= 1024 MiB")


if __name__ == "__main__":
    main()
