"""The Yahoo Streaming Benchmark and Traffic Monitoring jobs on a real Apache Flink (flink/jobs/ysb,
flink/jobs/traffic, docs/flink.md#the-jobs): both run at once, briefly, at two TaskManagers each, and
each is brought to one: YSB in reactive mode by stopping a TaskManager, Traffic Monitoring under the
adaptive scheduler by setting its scalable vertices' requirements from 2 to 1 (by the vertex map of
its chained vertices, docs/flink.md#per-vertex-parallelism), Flink running each at what was asked
(read back from the REST API) and every subtask reporting its accumulated busy time, then stopping
the TaskManager left without a task. Either job restarts from its last checkpoint and the source
replays what followed it; once the schedule has ended every event must be counted exactly once
(admitted by a window or let go by the filter), every window must have fired with results that stand
for every event it admitted, and no Flink process may be left. Flink is installed and the jobs built
by the project's script (the fixture of test_flink_engine.py)."""
from __future__ import annotations

import dataclasses
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

from testbed.flink import vertices as vx
from testbed.flink.cluster import FlinkCluster
from testbed.flink.jobs import TRAFFIC, YSB, JobSpec
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FlinkSettings

from .test_flink_engine import Recorder, flink_installed, wait_gone  # noqa: F401 (a fixture)

pytestmark = [
    pytest.mark.integration, pytest.mark.live, pytest.mark.slow, pytest.mark.usefixtures("cpu_hog"),
]

RATE = 100.0  # records/s, no cost per record: a small share of what one TaskManager carries
RUN_S = 12.0  # then nothing: the last windows close as the watermark follows the clock
WINDOW_S = 10.0  # the jobs' tumbling windows


def _balanced(r: JobReading, total: float) -> bool:
    src = r.source
    return (src is not None and src.emitted == total and r.subtask_count() == 1 and r.counted() == total
            and r.windowed() == r.admitted())


def _cluster(spec: JobSpec, settings: FlinkSettings, tmp_path: Path, stack: ExitStack) -> Recorder:
    scheduler = "adaptive" if spec is TRAFFIC else "reactive"
    s = dataclasses.replace(settings, job=spec.name, stop_mode="graceful", scheduler=scheduler)
    cluster = stack.enter_context(FlinkCluster(s, RateSchedule.of([(0, RATE), (RUN_S, 0)]), tmp_path / spec.name))
    cluster.start_processes(2, parallelism=2)  # the JobManager and two TaskManagers, not waited for
    return Recorder(cluster)


def _each(recs: List[Recorder], ok: Callable[[JobReading], bool], what: str, timeout_s: float) -> List[JobReading]:
    return [rec.until(ok, what, timeout_s) for rec in recs]


def _busy_ms(r: JobReading, vertex: str) -> List[float]:
    """The accumulated busy time each running subtask of one of Traffic Monitoring's vertices reports."""
    return [t.busy_ms for tm in r.taskmanagers for t in tm.tasks
            if (v := vx.TRAFFIC.vertex_of(t.task)) is not None and v.name == vertex]


def _idle(r: JobReading) -> List[str]:
    return [tm.name for tm in r.taskmanagers if not tm.tasks]


def _to_one(ysb: Recorder, traffic: Recorder) -> Tuple[JobReading, JobReading]:
    """YSB: a TaskManager stopped. Traffic Monitoring: both scalable vertices required at 1; once Flink
    runs them so, the TaskManager without a task is stopped. Returns Traffic's readings at 2 and at 1."""
    at_two = traffic.read()
    ysb.cluster.stop_taskmanager("tm-2")
    traffic.cluster.require(vx.TRAFFIC.requirements({"parse": 1, "speed": 1}))
    at_one = traffic.until(lambda r: r.status == "RUNNING" and vx.TRAFFIC.running(r) == ONE and r.subtask_count() == 1
                           and len(r.taskmanagers) == 2 and len(_idle(r)) == 1, "Traffic Monitoring's vertices at 1",
                           traffic.cluster.settings.start_timeout_s)
    [idle] = _idle(at_one)
    traffic.cluster.stop_taskmanager(idle)  # nothing runs there: the job goes on without a restart
    return at_two, at_one


TWO, ONE = {"source": 1, "parse": 2, "speed": 2}, {"source": 1, "parse": 1, "speed": 1}


def test_ysb_and_traffic_monitoring_count_every_event_once_across_a_restart(flink_installed, tmp_path):  # noqa: F811 (the fixture)
    s, total, t0 = flink_installed, RATE * RUN_S, time.monotonic()
    with ExitStack() as stack:
        # both jobs at once, their clusters started from this (the main) thread: the JVMs' start, the
        # bulk of the test's time, overlaps
        recs = [_cluster(spec, s, tmp_path, stack) for spec in (YSB, TRAFFIC)]
        _each(recs, lambda r: r.parallelism == 2 and r.subtask_count() == 2, "parallelism 2", s.start_timeout_s)
        _each(recs, lambda r: r.source is not None and r.source.emitted >= 3 * RATE, "3 s of records",
              s.start_timeout_s)
        pids_before = [pid for rec in recs for pid in rec.cluster.pids()]
        at_two, at_one = _to_one(*recs)
        _each(recs, lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1", s.start_timeout_s)
        # the schedule's rest, the last window (it closes once the watermark passes its end) and a restart
        drain_s = max(0.0, RUN_S - recs[0].cluster.now()) + WINDOW_S + s.start_timeout_s
        finals = _each(recs, lambda r: _balanced(r, total), "every event counted and every window fired", drain_s)
        requirements = recs[1].cluster.requirements()
        pids = [pid for rec in recs for pid in rec.cluster.pids()]
    assert not wait_gone(pids_before + pids, 5.0), "Flink processes left after the cluster closed"
    for spec, rec, final in zip((YSB, TRAFFIC), recs, finals, strict=True):
        assert final.counted() == total  # not more: what the restart replayed is not counted twice
        assert 0 < final.admitted() < total and final.windowed() == final.admitted()
        assert rec.parallelisms()[-2:] == [2, 1], rec.parallelisms()
        print(f"\n{spec.name}: {total:.0f} events, {final.admitted():.0f} admitted to windows, "
              f"{final.source.replayed:.0f} replayed by the source after the restart")
    # Traffic Monitoring per vertex: what was asked, read back from Flink, with each subtask's busy time
    assert vx.TRAFFIC.running(at_two) == TWO and vx.TRAFFIC.running(finals[1]) == ONE
    assert sorted(b["parallelism"]["upperBound"] for b in requirements.values()) == [1, 1, 1], requirements
    for vertex in ("parse", "speed"):
        busy = _busy_ms(at_two, vertex)
        assert len(busy) == 2 and all(b == b for b in busy) and sum(busy) > 0, (vertex, busy)  # b == b: not NaN
    # the TaskManager left without a task stopped, the job ran on where it ran, in the same task attempts
    assert [tm.name for tm in finals[1].taskmanagers] == [tm.name for tm in at_one.taskmanagers if tm.tasks]
    assert finals[1].attempts().keys() == at_one.attempts().keys()
    print(f"{time.monotonic() - t0:.0f} s, load average {os.getloadavg()}")
