"""What one TaskManager of a job carries (docs/flink.md#the-jobs-measured): one cluster of the job in
the backend's mode (`--mode wait`: `backend=flink`'s settings, a 5 ms wait per record; `--mode cpu`:
`backend=flink_cpu`'s, 2 ms of CPU per record under a 0.5-core limit), a schedule far above what it
carries (the source always behind), and the records counted exactly once per second at 1, 2, ...
--taskmanagers TaskManagers, each after a warm-up, with the working task's busy time, each
TaskManager cgroup's CPU (cpu mode) and the load average.

    flock /tmp/testbed-flink.lock flock /tmp/testbed-measure.lock \\
        .venv/bin/python benchmarks/bench_flink_jobs.py --job ysb --mode wait [--taskmanagers 2] [--out F.json]

Needs `bash infra/flink.sh build` (and, for the cpu mode, a writable cgroup hierarchy: root)."""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.flink.cluster import FlinkCluster  # noqa: E402
from testbed.flink.jobs import JOB_NAMES  # noqa: E402
from testbed.flink.metrics import JobReading, rates  # noqa: E402
from testbed.flink.schedule import RateSchedule  # noqa: E402
from testbed.flink.settings import from_mapping  # noqa: E402

BASE = dict(checkpoint_s=2.0, stabilization_s=1.0, cooldown_s=1.0, heartbeat_interval_s=1.0,
            heartbeat_timeout_s=10.0, restart_delay_s=0.5)
MODES = {"wait": dict(wait_us=5000), "cpu": dict(mode="cpu", tm_cpu_limit=0.5, work_us=2000)}
FLOOD_RATE = 1e6  # records/s: never reached, the source is always behind
EVERY_S = 1.0


def measure(cluster: FlinkCluster, n: int, warmup_s: float, seconds: float) -> Dict[str, object]:
    """Records counted per second at n TaskManagers (after warmup_s), per-TaskManager busy and CPU."""
    units = cluster.settings.units
    cluster.wait_until(lambda r: r.parallelism == n and r.subtask_count() == n, f"parallelism {n}")
    time.sleep(warmup_s)
    first = prev = cluster.read()
    busy: List[float] = []
    cores: List[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(EVERY_S)
        cur = cluster.read()
        r = rates(prev, cur)
        busy += list(r.busy.values())
        cores += list(r.cgroup_cpu.values())
        prev = cur
    rate = (prev.counted() - first.counted()) / units / (prev.t - first.t)
    work = [st.work_ns_per_word / 1000 for tm in prev.taskmanagers for st in tm.subtasks]
    return {"taskmanagers": n, "records_per_s": round(rate, 1), "per_taskmanager": round(rate / n, 1),
            "busy_median": round(statistics.median(busy), 3) if busy else None,
            "cgroup_cores_median": round(statistics.median(cores), 3) if cores else None,
            "work_us_measured": [round(w, 1) for w in work if not math.isnan(w)],
            "loadavg": open("/proc/loadavg").read().split()[:3]}


def run(job: str, mode: str, taskmanagers: int, warmup_s: float, seconds: float, work_dir: Path) -> dict:
    settings = from_mapping({**BASE, **MODES[mode], "job": job})
    figures = []
    with FlinkCluster(settings, RateSchedule.constant(FLOOD_RATE), work_dir) as cluster:
        cluster.start()
        for n in range(1, taskmanagers + 1):
            cluster.add_taskmanager()
            figures.append(measure(cluster, n, warmup_s, seconds))
            print(json.dumps({"job": job, "mode": mode, **figures[-1]}), flush=True)
        last: JobReading = cluster.read()
        record = cluster.record()
    return {"job": job, "mode": mode, "settings": settings.as_dict(), "capacity": record["capacity"],
            "figures": figures, "counted": last.counted(), "admitted": last.admitted()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", choices=JOB_NAMES, required=True)
    ap.add_argument("--mode", choices=tuple(MODES), required=True)
    ap.add_argument("--taskmanagers", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds at each parallelism before measuring")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per parallelism")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    out = run(a.job, a.mode, a.taskmanagers, a.warmup, a.seconds, Path(tempfile.mkdtemp(prefix="bench-jobs-")))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
