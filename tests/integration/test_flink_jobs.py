"""The Yahoo Streaming Benchmark and Traffic Monitoring jobs on a real Apache Flink in reactive mode
(flink/jobs/ysb, flink/jobs/traffic, docs/flink.md#the-jobs): both run at once, briefly, at two
TaskManagers each; one of each is stopped (the job restarts from its last checkpoint and the source
replays what followed it), and once the schedule has ended every event must be counted exactly once
(admitted by a window or let go by the filter), every window must have fired with results that stand
for every event it admitted, and no Flink process may be left. Flink is installed and the jobs built
by the project's script (the fixture of test_flink_engine.py)."""
from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, List

import pytest

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
    s = dataclasses.replace(settings, job=spec.name, stop_mode="graceful")
    cluster = stack.enter_context(FlinkCluster(s, RateSchedule.of([(0, RATE), (RUN_S, 0)]), tmp_path / spec.name))
    cluster.start_processes(2)  # the JobManager and two TaskManagers, not waited for
    return Recorder(cluster)


def _each(recs: List[Recorder], ok: Callable[[JobReading], bool], what: str, timeout_s: float) -> List[JobReading]:
    return [rec.until(ok, what, timeout_s) for rec in recs]


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
        for rec in recs:
            rec.cluster.stop_taskmanager("tm-2")
        _each(recs, lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1", s.start_timeout_s)
        # the schedule's rest, the last window (it closes once the watermark passes its end) and a restart
        drain_s = max(0.0, RUN_S - recs[0].cluster.now()) + WINDOW_S + s.start_timeout_s
        finals = _each(recs, lambda r: _balanced(r, total), "every event counted and every window fired", drain_s)
        pids = [pid for rec in recs for pid in rec.cluster.pids()]
    assert not wait_gone(pids_before + pids, 5.0), "Flink processes left after the cluster closed"
    for spec, rec, final in zip((YSB, TRAFFIC), recs, finals, strict=True):
        assert final.counted() == total  # not more: what the restart replayed is not counted twice
        assert 0 < final.admitted() < total and final.windowed() == final.admitted()
        assert rec.parallelisms()[-2:] == [2, 1], rec.parallelisms()
        print(f"\n{spec.name}: {total:.0f} events, {final.admitted():.0f} admitted to windows, "
              f"{final.source.replayed:.0f} replayed by the source after the restart")
    print(f"{time.monotonic() - t0:.0f} s")
