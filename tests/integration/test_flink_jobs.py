"""The Yahoo Streaming Benchmark and Traffic Monitoring jobs on a real Apache Flink in reactive mode
(flink/jobs/ysb, flink/jobs/traffic, docs/flink.md#the-jobs): each runs briefly at two TaskManagers,
one is stopped (the job restarts from its last checkpoint and the source replays what followed it),
and once the schedule has ended every event must be counted exactly once (admitted by a window or let
go by the filter), every window must have fired with results that stand for every event it admitted,
and no Flink process may be left. Flink is installed and the jobs built by the project's script (the
fixture of test_flink_engine.py)."""
from __future__ import annotations

import dataclasses
import time

import pytest

from testbed.flink.cluster import FlinkCluster
from testbed.flink.jobs import TRAFFIC, YSB, JobSpec
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule

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


def _run(spec: JobSpec, settings, tmp_path) -> dict:
    s = dataclasses.replace(settings, job=spec.name, stop_mode="graceful")
    schedule = RateSchedule.of([(0, RATE), (RUN_S, 0)])
    total = schedule.total()
    t0 = time.monotonic()
    with FlinkCluster(s, schedule, tmp_path / spec.name) as cluster:
        rec = Recorder(cluster)
        cluster.start()
        cluster.add_taskmanager()
        cluster.add_taskmanager()
        rec.until(lambda r: r.parallelism == 2 and r.subtask_count() == 2, "parallelism 2", s.start_timeout_s)
        rec.until(lambda r: r.source is not None and r.source.emitted >= 3 * RATE, "3 s of records", s.start_timeout_s)
        pids_before = cluster.pids()
        cluster.stop_taskmanager("tm-2")
        rec.until(lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1", s.start_timeout_s)
        # the schedule's rest, the last window (it closes once the watermark passes its end) and a restart
        drain_s = max(0.0, RUN_S - cluster.now()) + WINDOW_S + s.start_timeout_s
        final = rec.until(lambda r: _balanced(r, total), "every event counted and every window fired", drain_s)
        pids = cluster.pids()
    assert final.counted() == total  # not more: what the restart replayed is not counted twice
    assert 0 < final.admitted() < total and final.windowed() == final.admitted()
    assert rec.parallelisms()[:2] == [2, 1], rec.parallelisms()
    assert not wait_gone(pids_before + pids, 5.0), "Flink processes left after the cluster closed"
    return {"job": spec.name, "events": total, "admitted": final.admitted(), "replayed": final.source.replayed,
            "wall_s": round(time.monotonic() - t0, 1)}


def test_ysb_and_traffic_monitoring_count_every_event_once_across_a_restart(flink_installed, tmp_path):
    results = [_run(spec, flink_installed, tmp_path) for spec in (YSB, TRAFFIC)]
    for r in results:
        print(f"\n{r['job']}: {r['events']:.0f} events, {r['admitted']:.0f} admitted to windows, "
              f"{r['replayed']:.0f} replayed by the source after the restart; {r['wall_s']} s")
