"""This tree's simulated experiments against another commit's, side by side in one session: the same
`testbed experiment` command runs alternately on the old code (the commit, exported to a scratch
folder) and on this tree, RUNS times each, as subprocesses; each run's CPU time (user + system of
the process and its children) is measured, so that other load on a shared machine slows neither
side more than the other, and the ratio old / new is printed per pair and as the median. Each
pair's event-log tables are compared by content digest (tests/regression/table_digests.py): a
speed-up must leave every table as it was. One warm-up run per side first (not timed) when the old
code is exported: it compiles the simulator's kernels for the fresh tree.

    .venv/bin/python benchmarks/bench_against.py [--ref main | --old-tree DIR] [--runs 3] [OVERRIDE ...]

`--old-tree` takes the old code from a checkout as it is (e.g. another worktree at that commit, its
kernels already compiled), instead of exporting `--ref`.

The overrides default to one repetition of the compare evaluation's Daedalus configuration (per
operator on the OEE topology), 60 simulated minutes.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.eventlog import find_runs  # noqa: E402
from tests.regression.table_digests import run_digests  # noqa: E402

DEFAULT = ("evaluation=compare", "evaluation.only=[daedalus]", "reps=1", "duration_min=60")


def export(ref: str, into: Path) -> Path:
    """The tree of `ref` as files below `into` (git archive: no work tree, no caches)."""
    archive = into / "old.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref], check=True)
    tree = into / "old"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run(tree: Path, out: Path, overrides: Tuple[str, ...]) -> float:
    """CPU seconds of one experiment on `tree`'s code into `out`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "summary=false", "workers=1",
                    *overrides], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def digests(out: Path) -> Dict[str, str]:
    return run_digests(find_runs(out), out, None)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="the commit to compare against (default main)")
    parser.add_argument("--old-tree", type=Path, help="a checkout of the old code, used as it is")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per side (default 3)")
    parser.add_argument("overrides", nargs="*", help="experiment overrides (default: %(default)s)",
                        default=list(DEFAULT))
    args = parser.parse_args(argv)
    overrides = tuple(args.overrides)
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        scratch = Path(tmp)
        old = args.old_tree.resolve() if args.old_tree else export(args.ref, scratch)
        sides = {"old": old, "new": ROOT}
        for name, tree in sides.items() if not args.old_tree else ():  # the exported kernels compiled and cached
            run(tree, scratch / f"warm-{name}", ("reps=1", "duration_min=1", "evaluation.only=[threshold]"))
        ratios = []
        for k in range(args.runs):
            cpu = {name: run(tree, scratch / f"{name}-{k}", overrides) for name, tree in sides.items()}
            same = digests(scratch / f"old-{k}") == digests(scratch / f"new-{k}")
            ratios.append(cpu["old"] / cpu["new"])
            print(f"run {k + 1}: old {cpu['old']:.1f} s CPU, new {cpu['new']:.1f} s CPU, old/new "
                  f"{ratios[-1]:.2f}x; tables {'identical' if same else 'DIFFERENT'}", flush=True)
            if not same:
                return 1
        against = old if args.old_tree else args.ref
        print(f"{' '.join(overrides)} against {against}: median old/new {statistics.median(ratios):.2f}x "
              f"over {args.runs} pairs; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
