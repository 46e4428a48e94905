"""Sweep throughput of both executors on the same grid (part of `make bench`).

`testbed sweep` is run as a user runs it, a fresh process each, on the same grid into fresh
folders: first with `executor=local` (processes, one per core), then with `executor=spark`
(`spark.master=local[*]`, the JVM start included), one after the other, repeated (`--repeat`,
default 2). Printed: runs per minute of each executor (median), the ratio spark/local, and whether
the two wrote byte-identical event-log tables.

    python benchmarks/bench_sweep.py [--repeat N] [--grid OVERRIDE ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
# 16 runs of 60 simulated minutes: 2 patterns x 2 BTU lengths x 2 scaling thresholds x 2 repetitions
GRID = ["policy=btu", "duration_min=60", "reps=2", "pattern=stepwise,two_level", "billing.btu_minutes=10,60",
        "policies.btu.scaling_threshold=80,100"]


def sweep(out: Path, executor: str, grid: List[str]) -> float:
    cmd = [str(ROOT / ".venv" / "bin" / "testbed"), "sweep", *grid, f"out={out}", f"executor={executor}",
           "spark.master=local[*]"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return wall


def tables(out: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "runs").rglob("*.parquet"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--grid", nargs="*", default=GRID)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; grid: {' '.join(args.grid)}")
    walls: Dict[str, List[float]] = {"local": [], "spark": []}
    identical = True
    runs = 0
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for i in range(args.repeat):
            outs = {}
            for executor in ("local", "spark"):
                outs[executor] = Path(tmp) / f"{executor}-{i}"
                walls[executor].append(sweep(outs[executor], executor, args.grid))
            runs = len(list((outs["local"] / "runs").iterdir()))
            identical &= tables(outs["local"]) == tables(outs["spark"])
    rate = {e: runs / statistics.median(w) * 60.0 for e, w in walls.items()}
    for e in ("local", "spark"):
        print(f"sweep, executor={e:<5}: {runs} runs in {statistics.median(walls[e]):6.1f} s (median of "
              f"{args.repeat}) = {rate[e]:6.1f} runs/min")
    print(f"sweep: spark/local throughput ratio {rate['spark'] / rate['local']:.2f}; "
          f"event-log tables byte-identical: {'yes' if identical else 'NO'}")


if __name__ == "__main__":
    sys.exit(main())
