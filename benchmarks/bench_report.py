"""Time to report the 48-run paper matrix with the PySpark reporting job (part of `make bench`).

Simulates the matrix (4 patterns x threshold + BTU 10/30/60 x 3 repetitions, 120 min each) into a
temporary folder, then runs the whole report once, as `testbed report` does, and prints the time
split into Spark start, computation (metrics and figure data, per step) and figures + documents.
Target (issue 3): <= 120 s in total on this machine.

    python benchmarks/bench_report.py [--runs DIR] [key=value ...]
    (--runs: report existing runs instead of simulating; key=value: reporting config overrides)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hydra import compose, initialize_config_dir  # noqa: E402

from reporting.report import run_report  # noqa: E402
from reporting.report_config import parse_overrides  # noqa: E402
from testbed.config import CONF_DIR, register, to_typed, validate  # noqa: E402
from testbed.eventlog import find_runs  # noqa: E402
from testbed.experiment import run_experiment  # noqa: E402

PATTERNS = ("stepwise", "two_level", "random_walk_1", "random_walk_2")
TARGET_S = 120.0


def simulate(out: Path) -> float:
    register()
    start = time.perf_counter()
    for pattern in PATTERNS:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = validate(to_typed(compose("config", overrides=[
                f"pattern={pattern}", f"out={out}", "workers=0", "summary=false"])))
        run_experiment(cfg)
    return time.perf_counter() - start


def samples_of(root: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(d / "samples.parquet").metadata.num_rows for d in find_runs(root))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="report these runs instead of simulating the matrix")
    parser.add_argument("overrides", nargs="*", help="reporting config overrides, e.g. spark.master=local[2]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.runs
        if root is None:
            root = Path(tmp) / "runs"
            print(f"simulating the 48-run matrix for the report benchmark ... {simulate(root):.1f} s", flush=True)
        runs = len(find_runs(root))
        result = run_report(root, parse_overrides([f"out={Path(tmp) / 'report'}", *args.overrides]))
        t = result.timings
        total = t["spark_start_s"] + t["compute_s"] + t["render_s"]
        print(f"report of {runs} runs ({samples_of(root) / 1e6:.1f} M duration samples), Spark {result.master} "
              f"on {os.cpu_count()} cores:")
        print(f"  Spark start                    {t['spark_start_s']:6.1f} s")
        print(f"  computation                    {t['compute_s']:6.1f} s")
        for step, seconds in result.steps.items():
            print(f"    {step:<44} {seconds:5.1f} s")
        print(f"  figures, index.html, report.md {t['render_s']:6.1f} s")
        print(f"  total                          {total:6.1f} s   target <= {TARGET_S:.0f} s"
              + ("" if total <= TARGET_S else "   ** over target **"))


if __name__ == "__main__":
    main()
