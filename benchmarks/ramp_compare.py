"""The load ramp, simulator against Flink (docs/flink.md#the-load-ramp): reads the Flink runs of
benchmarks/flink_ramp.py, measures from them the TaskManager's capacity (the bands above 100 %) and
how the controllers' readings follow the truth (busy time against throughput / capacity and against
the cgroup's CPU; the cgroup's CPU against throughput / capacity, the job model's
job.cgroup_overhead; throughput against the arrivals), runs the same ramp on the job model (three
seeds) and prints latency per band, sim against the median and range of the Flink runs.

    .venv/bin/python benchmarks/ramp_compare.py RUN.json [RUN.json ...] [--fit] [--set job.KEY=VALUE]
        [--out FILE.json]

--fit chooses job.service_cv, job.service_period_s and job.batch_wait_ms on a grid
(job.base_latency_ms then follows from the lowest band) for the least worst ratio; without it the
model runs with the --set values."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.config import ExperimentConfig  # noqa: E402
from testbed.fidelity.ramp import (  # noqa: E402
    BandComparison,
    BandLatency,
    Interval,
    RampRun,
    RampSpec,
    band_of,
    cgroup_fit,
    compare,
    overload_capacity,
    per_second,
    points,
    reading_fit,
    table,
    windowed,
    within,
)
from testbed.fidelity.ramp_sim import ramp_config, simulated_bands, with_job  # noqa: E402

CV_GRID = (0.0, 0.05, 0.1, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3, 0.4)
BATCH_GRID = (0.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 100.0, 150.0)
PERIOD_GRID = (1, 2, 4)
SKIP_S = 15


def load(path: Path) -> Tuple[RampRun, int]:
    data = json.loads(path.read_text())
    spec = RampSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in data["spec"].items()})
    run = RampRun(spec, [Interval(**r) for r in data["intervals"]], {"path": str(path), **data.get("load_average", {})})
    return run, int(data["settings"]["words_per_sentence"])


def rate_at(spec: RampSpec, t: float) -> float:
    rate = 0.0
    for start, r in points(spec):
        if start <= t:
            rate = r
    return rate


def readings(run: RampRun, capacity: float, wps: int) -> Dict[str, object]:
    """The busy time against what it stands for, this run: against the utilisation (throughput /
    capacity, what the simulator's reading is made of) and the cgroup's CPU / limit, each as
    Flink's busy-time metric reads it (its gauge's 60 s window updated every 5 s: the bias and sd
    left) and, for comparison, as a pure delay (a rising ramp cannot tell a longer delay from a
    bias, so that fit is an upper bound); and the throughput reading against the arrivals."""
    rows = [r for r in run.intervals if r.dt > 0]
    t = [r.t for r in rows]
    seconds = int(max(t))
    busy = per_second(t, [r.busy for r in rows], seconds)
    busy[:SKIP_S] = np.nan  # the gauge's first values are not readings of the load (1.0, then 0)
    util = per_second(t, [min(1.0, r.words / wps / r.dt / capacity) for r in rows], seconds)
    share = per_second(t, [r.cpu_share for r in rows], seconds)
    out: Dict[str, object] = {}
    for name, truth in (("utilisation", util), ("cgroup", share)):
        out[f"busy_vs_{name}_windowed"] = dataclasses.asdict(reading_fit(busy, windowed(truth, 0, 60, 5), 1.0, 0.0))
        out[f"busy_vs_{name}_delayed"] = dataclasses.asdict(reading_fit(busy, truth, 1.0, 90.0))
    below = [r for r in rows if (b := band_of(run.spec, r.t)) is not None and run.spec.fractions[b] < 1.0]
    out["cgroup_vs_utilisation"] = dataclasses.asdict(cgroup_fit(run.spec, rows, capacity, wps))
    out["throughput_vs_arrivals"] = dataclasses.asdict(reading_fit(
        [r.words / wps / r.dt for r in below], [rate_at(run.spec, r.t - r.dt / 2) for r in below], 1.0, 5.0))
    return out


def error(sim: Sequence[BandLatency], flink: Sequence[Sequence[BandLatency]]) -> float:
    return max(abs(math.log(r.ratio)) for r in compare(sim, flink))


def fit(spec: RampSpec, cfg: ExperimentConfig, flink: Sequence[Sequence[BandLatency]]) -> Dict[str, float]:
    """service_cv and batch_wait_ms of the least worst |log ratio|, base latency from the lowest band."""
    low = float(np.median([run[0].mean_ms for run in flink]))
    f0 = spec.fractions[0]
    best: Tuple[float, Dict[str, float]] = (math.inf, {})
    for cv, batch, period in itertools.product(CV_GRID, BATCH_GRID, PERIOD_GRID):
        if cv == 0 and period > 1:
            continue
        job = dict(service_cv=cv, batch_wait_ms=batch, base_latency_ms=max(0.0, low - batch * f0),
                   service_period_s=period)
        e = error(simulated_bands(spec, with_job(cfg, **job)), flink)
        if e < best[0]:
            best = (e, job)
    return best[1]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="job.KEY=VALUE")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    loaded = [load(p) for p in args.runs]
    spec = loaded[0][0].spec
    caps = [overload_capacity(run.spec, run.intervals, w) for run, w in loaded]
    capacity = float(np.median(caps))
    flink = [run.bands() for run, _ in loaded]
    cfg = ramp_config(spec, capacity, args.set)
    job = fit(spec, cfg, flink) if args.fit else {}
    rows: List[BandComparison] = compare(simulated_bands(spec, with_job(cfg, **job)), flink)
    reads = [readings(run, cap, w) for (run, w), cap in zip(loaded, caps, strict=True)]
    print(f"capacity (sentences/s, bands above 100 %): {', '.join(f'{c:.2f}' for c in caps)}; median {capacity:.2f}")
    print(f"model: {job or 'as --set'} {args.set}")
    print(table(rows))
    print(f"every band within 30 %: {within(rows)}")
    for (run, _), r in zip(loaded, reads, strict=True):
        print(run.meta["path"], json.dumps(r))
    if args.out:
        args.out.write_text(json.dumps({"capacity": caps, "model": job, "set": args.set,
                                        "bands": [dataclasses.asdict(r) for r in rows], "readings": reads,
                                        "load_average": [run.meta for run, _ in loaded]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
