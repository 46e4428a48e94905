"""Wall time of the PySpark report against the pandas summary of the same runs (part of `make bench`).

Both are run as a user runs them, a fresh process each, JVM start included for the report:
`testbed report DIR out=...` and `testbed summary DIR`. Every figure is a ratio of the two measured
side by side (report, then summary, on the same folder, one pair after the other), so that a busy
shared machine slows both sides alike; each pair is repeated (`--repeat`, default 2) and the
median reported. Runs folders (simulated into a temporary folder unless given):

* 12 runs: the paper's matrix of one pattern (`testbed experiment pattern=stepwise out=DIR`);
* 48 runs: the matrix of all four patterns in one folder;
* one run: a single run folder of the 12 (btu-10, repetition 1).

Before them, one report that is not counted: the first report on a machine writes the archive of
Spark's classes that later reports' JVMs start from (reporting.class_archive), which costs it
seconds once.

Targets (issue 17, 2-core machine): the report of 12 runs at most 2x the summary's wall time, the
report of one run under 20 s, of 48 runs under 45 s.

    python benchmarks/bench_report.py [--runs DIR] [--repeat N] [report overrides key=value ...]
    (--runs: a folder holding the four patterns' folders, as written by `testbed experiment
     pattern=X out=DIR`; `testbed summary` writes summary.csv into the folders it summarises)
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reporting.class_archive import ClassArchive  # noqa: E402

PATTERNS = ("stepwise", "two_level", "random_walk_1", "random_walk_2")
TARGET_RATIO_12, TARGET_ONE_S, TARGET_48_S = 2.0, 20.0, 45.0


def testbed(*args: str) -> Tuple[float, str]:
    """Wall time and stdout of one `testbed` command of this tree (a fresh process, as a user runs it)."""
    exe = Path(sys.executable).with_name("testbed")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run([*cmd, *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def simulate(out: Path) -> float:
    return sum(testbed("experiment", f"pattern={p}", f"out={out}", "summary=false")[0] for p in PATTERNS)


def runs_in(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("manifest.json"))


def compare(name: str, folder: Path, report_out: Path, repeat: int, overrides: Sequence[str]) -> Tuple[float, float]:
    """(median report s, median ratio report / summary) over `repeat` side-by-side pairs."""
    print(f"\n{name}: {runs_in(folder)} run(s) in {folder}")
    reports: List[float] = []
    ratios: List[float] = []
    for _ in range(repeat):
        report_s, stdout = testbed("report", str(folder), f"out={report_out}", *overrides)
        summary_s, _ = testbed("summary", str(folder))
        split = re.search(r"Spark start.*", stdout)
        reports.append(report_s)
        ratios.append(report_s / summary_s)
        print(f"   report {report_s:6.1f} s   summary {summary_s:5.1f} s   ratio {report_s / summary_s:4.1f}x   "
              f"load {os.getloadavg()[0]:.1f}   ({split.group(0) if split else 'no timing line'})")
    return statistics.median(reports), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="report these runs instead of simulating the matrix")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="report config overrides, e.g. spark.master=local[2]")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.runs
        if root is None:
            root = Path(tmp) / "runs"
            print(f"simulating the 48-run matrix ... {simulate(root):.1f} s")
        one_run = root / "stepwise" / "btu-10" / "1"
        archived = ClassArchive().path.is_file()
        first_s, _ = testbed("report", str(one_run), f"out={Path(tmp) / 'report'}", *args.overrides)
        print(f"first report (one run; {'the class archive exists' if archived else 'writes the class archive'}): "
              f"{first_s:.1f} s, not counted")
        cases = [("one run", one_run), ("12 runs (stepwise)", root / "stepwise"), ("48 runs (4 patterns)", root)]
        results = {name: compare(name, folder, Path(tmp) / "report", args.repeat, args.overrides)
                   for name, folder in cases}
    (one_s, _), (_, ratio_12), (all_s, ratio_48) = results.values()
    print("\nmedians:")
    print(f"   12 runs: report / summary {ratio_12:4.1f}x   target <= {TARGET_RATIO_12:.0f}x"
          + ("" if ratio_12 <= TARGET_RATIO_12 else "   ** over target **"))
    print(f"   one run: report {one_s:5.1f} s   target < {TARGET_ONE_S:.0f} s"
          + ("" if one_s < TARGET_ONE_S else "   ** over target **"))
    print(f"   48 runs: report {all_s:5.1f} s ({ratio_48:.1f}x the summary)   target < {TARGET_48_S:.0f} s"
          + ("" if all_s < TARGET_48_S else "   ** over target **"))


if __name__ == "__main__":
    main()
