"""The job model's speed with and without queueing below capacity and the lagged CPU reading
(docs/papers/daedalus.md#queueing-below-capacity): one 6-hour job-mode simulation (evaluation
`daedalus`, workload wc_sine, HPA: the model and a cheap controller), timed in fresh processes
taken in turns, so that a busy machine slows every side alike. `--baseline TREE` adds another
source tree's job model (e.g. the main branch's) as the reference the ratios are taken against.

    .venv/bin/python benchmarks/bench_job_queue.py [--repeat 3] [--baseline /path/to/other/tree]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
# profile flink_cpu_queue's settings (a batch wait added, so that every new path runs)
QUEUEING = ("job.service_cv=0.1", "job.service_period_s=288", "job.batch_wait_ms=3600", "job.cpu_window_s=4320",
            "job.cpu_update_s=360", "job.cpu_bias=-0.11")

SNIPPET = """
import sys, time
from testbed.fidelity.evaluation import compose_experiment
from testbed.experiment import build_pattern
from testbed.placement.base import make_placement
from testbed.policies.registry import make_policy
from testbed.sim.job import JobSimulation
cfg = compose_experiment(["evaluation=daedalus", "pattern=wc_sine", "policy=hpa", *sys.argv[1:]])
policy = make_policy("hpa", cfg.policies["hpa"], make_placement("first_fit", cfg.placement))
pattern = build_pattern(cfg.pattern, 1)
t = time.perf_counter()
JobSimulation(cfg, policy, pattern, 1).run()
print(time.perf_counter() - t)
"""


def timed(tree: Path, overrides: Tuple[str, ...]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", SNIPPET, *overrides], env=env, cwd=tree, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another tree's job model as the reference")
    args = ap.parse_args(argv)
    sides: Dict[str, Tuple[Path, Tuple[str, ...]]] = {}
    if args.baseline:
        sides["baseline tree, defaults"] = (args.baseline.resolve(), ())
    sides["this tree, defaults"] = (ROOT, ())
    sides["this tree, queueing + CPU lag"] = (ROOT, QUEUEING)
    times: Dict[str, List[float]] = {k: [] for k in sides}
    for _ in range(args.repeat):
        for name, (tree, overrides) in sides.items():
            times[name].append(timed(tree, overrides))
    ref = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:34s} median {med:6.3f} s  ({', '.join(f'{t:.3f}' for t in ts)})  ratio {med / ref:5.2f}")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
