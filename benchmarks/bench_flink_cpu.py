"""The cpu mode on this machine (docs/flink.md#cpu-mode): each TaskManager in a cgroup with a CPU
limit, the counter doing --work-us of CPU work per word. One cluster, one schedule:

* the CPU reading: one TaskManager, the rate stepped through fractions of its nominal capacity
  (limit / work per word) for STEP_S each; every reading interval the counting task's busy fraction
  (what HPA and Daedalus read as CPU) beside the TaskManager cgroup's CPU time / limit. Bias = their
  mean difference; lag = the shift of the busy series that best matches the cgroup's;
* capacity: then the schedule floods (the source always behind) and the counted rate is measured at
  1, 2, ... --taskmanagers TaskManagers, with each one's cgroup CPU, the time its quota held it back,
  the busy time and the word's measured CPU cost.

    flock /tmp/testbed-services.lock .venv/bin/python benchmarks/bench_flink_cpu.py [--out FILE.json]
        [--set KEY=VALUE] [--taskmanagers 4] [--seconds 15]

Prints one line per figure and writes them with the settings and the per-interval series (--out).
Needs `bash infra/flink.sh build` and a writable cgroup hierarchy (root)."""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.flink.cluster import FlinkCluster  # noqa: E402
from testbed.flink.metrics import JobRates, JobReading, rates  # noqa: E402
from testbed.flink.schedule import RateSchedule  # noqa: E402
from testbed.flink.settings import FlinkSettings, from_mapping  # noqa: E402

BENCH = dict(checkpoint_s=2.0, stabilization_s=1.0, cooldown_s=1.0, heartbeat_interval_s=1.0,
             heartbeat_timeout_s=10.0, restart_delay_s=0.5, mode="cpu", tm_cpu_limit=0.5, work_us=2000)
STEPS = (0.2, 0.5, 0.8, 0.5, 0.2, 0.65, 0.35)  # fractions of the nominal capacity, STEP_S each
STEP_S = 10.0
FLOOD_RATE = 1e6  # sentences/s: never reached, the source is always behind
EVERY_S = 0.5


def nominal_rate(s: FlinkSettings) -> float:
    """Sentences/s one TaskManager would carry if the word's work were all it spent CPU on."""
    return s.tm_cpu_limit * 1e6 / (s.work_us * s.words_per_sentence)


def schedule(s: FlinkSettings) -> RateSchedule:
    points = [(i * STEP_S, f * nominal_rate(s)) for i, f in enumerate(STEPS)]
    return RateSchedule.of(points + [(len(STEPS) * STEP_S, FLOOD_RATE)])


def watch(cluster: FlinkCluster, seconds: float, log: List[JobReading]) -> List[JobReading]:
    end, out = time.monotonic() + seconds, []
    while time.monotonic() < end:
        r = cluster.read()
        out.append(r)
        log.append(r)
        time.sleep(EVERY_S)
    return out


def intervals(readings: List[JobReading]) -> List[JobRates]:
    return [rates(a, b) for a, b in zip(readings, readings[1:], strict=False)]


def best_lag(busy: List[float], used: List[float], max_shift: int) -> Tuple[int, float]:
    """The shift k >= 0 (in intervals) for which busy[i + k] tracks used[i] best (least mean
    absolute difference), and that difference."""
    best = (0, math.inf)
    for k in range(max_shift + 1):
        pairs = list(zip(used, busy[k:], strict=False))
        if len(pairs) < 5:
            break
        err = statistics.fmean(abs(b - u) for u, b in pairs)
        if err < best[1]:
            best = (k, err)
    return best


def reading_figures(s: FlinkSettings, cluster: FlinkCluster, log: List[JobReading]) -> Dict[str, object]:
    """The busy time against the cgroup's CPU / limit, one TaskManager, the stepped load."""
    tm = "tm-1"
    cluster.wait_until(lambda r: r.source is not None and r.source.scheduled > 0, "the schedule started")
    readings = watch(cluster, len(STEPS) * STEP_S - 1.0, log)
    rows = [(r.t, r.busy.get(tm, math.nan), r.cgroup_cpu.get(tm, math.nan) / s.tm_cpu_limit,
             sum(r.throughput.values()) / s.words_per_sentence, r.workload)
            for r in intervals(readings) if r.parallelism == 1]
    rows = [row for row in rows if not (math.isnan(row[1]) or math.isnan(row[2]))]
    busy, used = [row[1] for row in rows], [row[2] for row in rows]
    diff = [b - u for b, u in zip(busy, used, strict=True)]
    lag, err = best_lag(busy, used, int(5.0 / EVERY_S))
    return {"reading_intervals": len(rows), "busy_minus_cgroup_mean": statistics.fmean(diff),
            "busy_minus_cgroup_sd": statistics.stdev(diff), "busy_mean": statistics.fmean(busy),
            "cgroup_share_of_limit_mean": statistics.fmean(used), "busy_lag_s": lag * EVERY_S,
            "busy_lag_mean_abs_error": err, "series": rows}


def at(p: int) -> Callable[[JobReading], bool]:
    return lambda r: r.parallelism == p and r.subtask_count() == p


def registered(name: str) -> Callable[[JobReading], bool]:
    return lambda r: name in r.registered


def capacity_figures(s: FlinkSettings, cluster: FlinkCluster, top: int, seconds: float,
                     log: List[JobReading]) -> Dict[str, object]:
    fig: Dict[str, object] = {}
    wps = s.words_per_sentence
    for p in range(1, top + 1):
        if p > 1:
            t = time.monotonic()
            name = cluster.add_taskmanager()
            cluster.wait_until(registered(name), f"{name} registered")
            fig[f"registration_s[{name}]"] = round(time.monotonic() - t, 1)
        cluster.wait_until(at(p), f"parallelism {p}")
        watch(cluster, 5.0, log)  # warm-up: the restart's replay, the JIT
        readings = [r for r in watch(cluster, seconds, log) if r.parallelism == p]
        a, b = readings[0], readings[-1]
        dt = b.t - a.t
        fig[f"p{p}_sentences_per_s"] = round((b.counted() - a.counted()) / wps / dt, 2)
        fig[f"p{p}_load_average"] = os.getloadavg()[0]
        before = {tm.name: tm for tm in a.taskmanagers}
        for tm in b.taskmanagers:
            old = before.get(tm.name)
            if old is None or tm.cgroup_cpu_s is None or old.cgroup_cpu_s is None:
                continue
            fig[f"p{p}_cgroup_cores[{tm.name}]"] = round((tm.cgroup_cpu_s - old.cgroup_cpu_s) / dt, 3)
            fig[f"p{p}_throttled_share[{tm.name}]"] = round(
                ((tm.cgroup_throttled_s or 0.0) - (old.cgroup_throttled_s or 0.0)) / dt, 3)
            work = [st.work_ns_per_word for st in tm.subtasks if not math.isnan(st.work_ns_per_word)]
            if work:
                fig[f"p{p}_work_us_per_word[{tm.name}]"] = round(work[0] / 1000.0, 1)
        busy = [st.busy_ms_per_s for r in readings for tm in r.taskmanagers for st in tm.subtasks
                if not math.isnan(st.busy_ms_per_s)]
        fig[f"p{p}_busy_ms_per_s_median"] = statistics.median(busy) if busy else math.nan
    return fig


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--taskmanagers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds per parallelism")
    args = ap.parse_args(argv)
    settings = from_mapping({**BENCH, **dict(kv.split("=", 1) for kv in args.set)})
    work = Path(tempfile.mkdtemp(prefix="bench-flink-cpu-"))
    log: List[JobReading] = []
    fig: Dict[str, object] = {"nominal_sentences_per_s": nominal_rate(settings)}
    with FlinkCluster(settings, schedule(settings), work / "flink") as cluster:
        t = time.monotonic()
        cluster.start()
        fig["jobmanager_rest_up_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        cluster.add_taskmanager()
        cluster.wait_until(lambda r: "tm-1" in r.registered, "tm-1 registered")
        fig["registration_s[tm-1]"] = round(time.monotonic() - t, 1)
        cluster.wait_until(lambda r: r.parallelism == 1, "parallelism 1")
        fig.update(reading_figures(settings, cluster, log))
        fig.update(capacity_figures(settings, cluster, args.taskmanagers, args.seconds, log))
        record = cluster.record()
        cgroup_dirs = cluster.cgroups.paths() if cluster.cgroups is not None else []
    fig["cgroups_left_after_close"] = [str(d) for d in cgroup_dirs if d.exists()]
    fig["work"] = record["capacity"]["work"]
    for key, value in fig.items():
        if key != "series":
            print(f"{key:44s} {value}")
    if args.out:
        args.out.write_text(json.dumps({"settings": settings.as_dict(), "capacity": record["capacity"],
                                        "figures": fig}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
