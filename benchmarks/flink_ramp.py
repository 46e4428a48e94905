"""The load ramp on a real Flink TaskManager (docs/flink.md#the-load-ramp): one TaskManager in the
cpu mode (0.5 cores, 2,000 µs of CPU per word: backend=flink_cpu's settings), static parallelism 1,
the load stepped through fractions of its capacity (testbed/fidelity/ramp.py). Every reading interval
records the words counted, their latency sum, the counting task's busy time and the TaskManager
cgroup's CPU; the run's JSON feeds `benchmarks/ramp_compare.py`.

    flock /tmp/testbed-flink.lock flock /tmp/testbed-measure.lock \\
        .venv/bin/python benchmarks/flink_ramp.py --out runs/ramp/flink-1.json [--set KEY=VALUE]

Needs `bash infra/flink.sh build` and a writable cgroup hierarchy (root)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.fidelity.ramp import Interval, RampSpec, points  # noqa: E402
from testbed.flink.cluster import FlinkCluster  # noqa: E402
from testbed.flink.metrics import JobReading  # noqa: E402
from testbed.flink.schedule import RateSchedule  # noqa: E402
from testbed.flink.settings import FlinkSettings, from_mapping  # noqa: E402

SETTINGS = dict(checkpoint_s=2.0, stabilization_s=1.0, cooldown_s=1.0, mode="cpu", tm_cpu_limit=0.5, work_us=2000)
EVERY_S = 1.0


def counter(r: JobReading) -> Optional[Tuple[str, float, float, float, float]]:
    """(attempt, words, latency sum, busy ms/s, histogram p95) of the one counting subtask."""
    subs = [st for tm in r.taskmanagers for st in tm.subtasks]
    if len(subs) != 1:
        return None
    st = subs[0]
    return st.attempt, st.records_in, st.latency_sum_ms, st.busy_ms_per_s, st.latency_p95_ms


def cgroup_s(r: JobReading) -> float:
    vals = [tm.cgroup_cpu_s for tm in r.taskmanagers if tm.cgroup_cpu_s is not None]
    return vals[0] if vals else math.nan


def interval(prev: Tuple[float, JobReading], cur: Tuple[float, JobReading], s: FlinkSettings) -> Optional[Interval]:
    (w0, r0), (w1, r1) = prev, cur
    a, b = counter(r0), counter(r1)
    if a is None or b is None or a[0] != b[0] or r1.source is None or not r1.source.start_ms:
        return None
    dt = w1 - w0
    return Interval(t=w1 - r1.source.start_ms / 1000.0, words=b[1] - a[1], latency_sum_ms=b[2] - a[2],
                    busy=b[3] / 1000.0, cpu_share=(cgroup_s(r1) - cgroup_s(r0)) / dt / s.tm_cpu_limit, dt=dt)


def run_ramp(spec: RampSpec, settings: FlinkSettings, work: Path) -> Dict[str, object]:
    rows: List[Interval] = []
    p95: List[Tuple[float, float]] = []
    load = [os.getloadavg()[0]]
    with FlinkCluster(settings, RateSchedule.of(points(spec)), work) as cluster:
        cluster.start()
        cluster.add_taskmanager()
        cluster.wait_until(lambda r: r.parallelism == 1 and r.source is not None and r.source.start_ms > 0,
                           "the job running at parallelism 1")
        prev = (time.time(), cluster.read())
        start = prev[1].source.start_ms / 1000.0 if prev[1].source else time.time()
        while time.time() < start + spec.duration_s + 1.0:
            time.sleep(EVERY_S)
            cur = (time.time(), cluster.read())
            row = interval(prev, cur, settings)
            if row is not None:
                rows.append(row)
                c = counter(cur[1])
                p95.append((row.t, c[4] if c else math.nan))
            load.append(os.getloadavg()[0])
            prev = cur
        record = cluster.record()
    return {"spec": dataclasses.asdict(spec), "settings": settings.as_dict(), "capacity": record["capacity"],
            "intervals": [dataclasses.asdict(r) for r in rows], "histogram_p95": p95,
            "load_average": {"min": min(load), "max": max(load), "mean": sum(load) / len(load)}}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Flink setting")
    ap.add_argument("--capacity", type=float, default=RampSpec.capacity, help="sentences/s of one TaskManager")
    ap.add_argument("--band-s", type=float, default=RampSpec.band_s)
    args = ap.parse_args(argv)
    spec = RampSpec(capacity=args.capacity, band_s=args.band_s)
    spec.validate()
    settings = from_mapping({**SETTINGS, **dict(kv.split("=", 1) for kv in args.set)})
    t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = run_ramp(spec, settings, Path(tempfile.mkdtemp(prefix="flink-ramp-")) / "flink")
    result["started_utc"] = t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"{args.out}: {len(result['intervals'])} intervals, load average {result['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
