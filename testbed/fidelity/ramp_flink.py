"""The load ramp on a real Flink TaskManager (docs/flink.md#the-load-ramp): one TaskManager, static
parallelism 1, the ramp's schedule (testbed/fidelity/ramp.py); every reading interval the words
counted, their latency sum, the counting task's busy time and the TaskManager cgroup's CPU."""
from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from testbed.fidelity.ramp import Interval, RampSpec, points
from testbed.flink.cluster import FlinkCluster
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FlinkSettings

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
