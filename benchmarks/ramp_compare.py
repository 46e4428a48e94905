"""The load ramp, simulator against Flink (docs/flink.md#the-load-ramp): reads the Flink runs of
benchmarks/flink_ramp.py, measures from them the TaskManager's capacity (the bands above 100 %) and
how the controllers' readings follow the truth (busy time against throughput / capacity and against
the cgroup's CPU; throughput against the arrivals), runs the same ramp on the job model (three
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
    compare,
    overload_capacity,
    points,
    reading_fit,
    table,
    within,
)
from testbed.fidelity.ramp_sim import ramp_config, simulated_bands, with_job  # noqa: E402

CV_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
BATCH_GRID = (0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 200.0, 300.0)
PERIOD_GRID = (1, 2, 4)


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
    """The busy time and the throughput reading against what they stand for, this run."""
    rows = [r for r in run.intervals if r.dt > 0]
    util = [min(1.0, r.words / wps / r.dt / capacity) for r in rows]
    step = float(np.median([r.dt for r in rows]))

    def thr(r: Interval) -> float:
        return r.words / wps / r.dt

    def below(r: Interval) -> bool:  # throughput follows arrivals only below capacity
        b = band_of(run.spec, r.t)
        return b is not None and run.spec.fractions[b] < 1.0
    out = {}
    for name, reading, truth in (("busy_vs_utilisation", [r.busy for r in rows], util),
                                 ("busy_vs_cgroup", [r.busy for r in rows], [r.cpu_share for r in rows]),
                                 ("throughput_vs_arrivals", [thr(r) for r in rows],
                                  [rate_at(run.spec, r.t - r.dt / 2) if below(r) else math.nan for r in rows])):
        out[name] = dataclasses.asdict(reading_fit(reading, truth, step, 10.0))
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
