"""Speed and memory of the simulated testbed on this machine (`make bench`).

Every figure is a ratio or a wall time measured side by side in this one process, so that a busy
shared machine slows both sides of a ratio alike; each is repeated (`--repeat`, default 3) and the
median reported:

* the cohort model against the per-item reference model (`backend.exact=true`) on the same
  120-minute run (stepwise, BTU-60), simulation only; the cohort run's event-log writing apart;
* simulated time over wall time of one such run as a subprocess, process start included
  (`testbed experiment ... reps=1 summary=false`), and of the same command as a user types it,
  which also prints the summary table (read back from the event log with pandas);
* the 48-run paper matrix (`testbed experiment pattern=X` for the four patterns, 12 runs each, as
  subprocesses on all cores), once (`--matrix-repeat`), and the peak memory of its largest process.

Targets (issue 17, 2-core machine): the cohort model >= 5x faster than the per-item model, one run
>= 3,600x faster than real time including process start, the matrix < 45 s.

    .venv/bin/python benchmarks/bench.py [--repeat N] [--matrix-repeat N] [--no-matrix]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hydra import compose, initialize_config_dir  # noqa: E402

from testbed.config import CONF_DIR, register, to_typed, validate  # noqa: E402
from testbed.eventlog import EventLog  # noqa: E402
from testbed.experiment import build_pattern, config_for, plan_runs, policy_for  # noqa: E402
from testbed.sim.simulator import Simulation  # noqa: E402

PATTERNS = ("stepwise", "two_level", "random_walk_1", "random_walk_2")
ONE_RUN = ("pattern=stepwise", "reps=1", "policy=btu", "billing.btu_minutes=60")
DURATION_S = 120 * 60.0


def config(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


def simulate(out: Path, *overrides: str):
    """(simulation s, event-log writing s, samples) of one run in this process."""
    cfg = config(*ONE_RUN, f"out={out}", *overrides)
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
    return simulated, time.perf_counter() - start - simulated, len(result.tables["samples"]["t_s"])


def testbed(*args: str) -> float:
    """Wall time of one `testbed` command of this tree (a fresh process, as a user runs it)."""
    exe = Path(sys.executable).with_name("testbed")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run([*cmd, *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def median(values):
    return statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--matrix-repeat", type=int, default=1)
    ap.add_argument("--no-matrix", action="store_true")
    args = ap.parse_args()
    register()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        simulate(out / "warm", "duration_min=5")  # imports, caches, compiled code
        simulate(out / "warm-exact", "duration_min=5", "backend.exact=true")

        print("\n1. one 120-min run (stepwise, btu-60), cohort model vs per-item reference, simulation only")
        ratios, cohort_s = [], []
        for r in range(args.repeat):
            sim, log, samples = simulate(out / f"cohort{r}")
            exact, _, exact_samples = simulate(out / f"exact{r}", "backend.exact=true")
            ratios.append(exact / sim)
            cohort_s.append(sim)
            print(f"   cohort {sim:6.2f} s (+ event log {log:.2f} s, {samples} samples)   "
                  f"per-item {exact:6.2f} s ({exact_samples} samples)   ratio {exact / sim:5.1f}x")
        print(f"   median: cohort {median(cohort_s):.2f} s, {median(ratios):.1f}x faster than the per-item model"
              f"   target >= 5x")

        print("\n2. one 120-min run as a subprocess, process start included")
        walls, typed = [], []
        for r in range(args.repeat):
            walls.append(testbed("experiment", *ONE_RUN, f"out={out / f'proc{r}'}", "summary=false"))
            typed.append(testbed("experiment", *ONE_RUN, f"out={out / f'user{r}'}"))
            start_only = testbed("experiment", *ONE_RUN, f"out={out / f'start{r}'}", "summary=false", "duration_min=1")
            print(f"   {walls[-1]:6.2f} s wall = {DURATION_S / walls[-1]:6.0f}x real time "
                  f"(with the summary table: {typed[-1]:.2f} s; a 1-min run, about the process start alone: "
                  f"{start_only:.2f} s)")
        print(f"   median: {median(walls):.2f} s = {DURATION_S / median(walls):.0f}x real time   target >= 3600x")
        print(f"   median with the summary table (as a user types it): {median(typed):.2f} s = "
              f"{DURATION_S / median(typed):.0f}x real time")

        if not args.no_matrix:
            print("\n3. paper matrix: 4 patterns x 12 runs x 120 min, `testbed experiment pattern=X` on "
                  f"{os.cpu_count()} cores")
            totals = []
            for r in range(args.matrix_repeat):
                per = [testbed("experiment", f"pattern={p}", f"out={out / f'matrix{r}'}", "summary=false")
                       for p in PATTERNS]
                totals.append(sum(per))
                print(f"   {totals[-1]:6.1f} s wall "
                      f"({', '.join(f'{p} {s:.1f} s' for p, s in zip(PATTERNS, per, strict=True))})")
            print(f"   median: {median(totals):.1f} s ({median(totals) / 48:.2f} s per run)   target < 45 s")
        print(f"\npeak memory: this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
              f"largest child {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MiB   "
              "target <= 1024 MiB")


if __name__ == "__main__":
    main()
