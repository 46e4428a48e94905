"""A TaskManager in the cpu mode on a real Flink (docs/flink.md#cpu-mode): in a cgroup of 0.5 cores,
counting words that cost 2 ms of CPU each, with the source always ahead. CPU must be what limits
it: the cgroup runs at its quota (and is held back by it), the counted rate stays at what the limit
buys, a word costs about the calibrated CPU time. Killed behind the cluster's back and then stopped
as a run stops a lost TaskManager, its cgroup must be gone, and the cluster's once it closes; the
run's record names the mode, the limit and the work per word.

One cluster, about a minute (the TaskManager's JVM starts under its limit). Runs under the
machine-wide lock, as every Flink test."""
from __future__ import annotations

import os
import signal
import time

import pytest

from testbed.flink.cluster import FlinkCluster
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FlinkSettings

from .test_flink_engine import flink_installed, wait_gone  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.slow]

LIMIT, WORK_US = 0.5, 2000.0
NOMINAL = LIMIT * 1e6 / (WORK_US * 8)  # sentences/s if the words' work were all the TaskManager did
FLOOD = 1e6  # sentences/s: the source is always ahead
MEASURE_S = 8.0


def cpu_settings(base: FlinkSettings) -> FlinkSettings:
    import dataclasses

    return dataclasses.replace(base, mode="cpu", tm_cpu_limit=LIMIT, work_us=WORK_US).validate()


def test_a_cpu_mode_taskmanager_runs_at_its_limit_and_leaves_no_cgroup(flink_installed, tmp_path):  # noqa: F811
    s = cpu_settings(flink_installed)
    with FlinkCluster(s, RateSchedule.constant(FLOOD), tmp_path / "flink") as cluster:
        cluster.start()
        name = cluster.add_taskmanager()
        assert cluster.cgroups is not None
        tm_dirs = [d / name for d in cluster.cgroups.paths()]
        assert all(d.is_dir() for d in tm_dirs)
        pid = cluster.taskmanagers[name].pid
        assert all(str(pid) in (d / "cgroup.procs").read_text().split() for d in tm_dirs)
        cluster.wait_until(lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1")
        time.sleep(3.0)  # past the first start's burst (JIT, restored buffers)
        a = cluster.read()
        time.sleep(MEASURE_S)
        b = cluster.read()
        cores, throttled, rate, work_us = measure(a, b, name)
        print(f"\n{cores:.3f} cores of {LIMIT}, throttled {throttled:.2f} s/s, {rate:.1f} sentences/s "
              f"(nominal {NOMINAL:.1f}), a word {work_us:.0f} us of CPU; record {cluster.record()['capacity']}")
        # never above the limit; near it unless other processes leave the TaskManager less (then its
        # quota would not be reached and nothing throttled: no run at the limit to judge)
        assert LIMIT * 0.5 <= cores <= LIMIT * 1.05, f"{cores:.3f} cores under a {LIMIT}-core limit"
        assert throttled > 0, "a TaskManager at its limit waits for its quota"
        assert 0.5 * NOMINAL <= rate <= 1.1 * NOMINAL, f"{rate:.1f} sentences/s at a nominal {NOMINAL:.1f}"
        assert 0.7 * WORK_US <= work_us <= 1.3 * WORK_US, f"a word cost {work_us:.0f} us of CPU"
        capacity = cluster.record()["capacity"]
        assert (capacity["mode"], capacity["tm_cpu_limit"], capacity["work"]["work_us"]) == ("cpu", LIMIT, WORK_US)
        assert capacity["work"]["rounds"] > 0 and capacity["cgroups"]["quota_us"] == 50_000

        os.kill(pid, signal.SIGKILL)  # a crashed TaskManager; the run then stops it as lost
        cluster.stop_taskmanager(name, mode="kill")
        assert not any(d.exists() for d in tm_dirs), "a killed TaskManager's cgroup is left"
        assert cluster.record()["capacity"]["usage"][name]["cpu_s"] > cores * MEASURE_S * 0.9
        cluster_dirs, pids = cluster.cgroups.paths(), cluster.pids()
    assert not any(d.exists() for d in cluster_dirs), "the cluster's cgroup is left after close"
    assert not wait_gone(pids + [pid], 5.0)


def measure(a: JobReading, b: JobReading, name: str) -> tuple:
    """Cores the TaskManager's cgroup used, seconds per second its quota held it back, sentences
    counted per second, and the CPU microseconds a word's work took (as the job timed them)."""
    dt = b.t - a.t
    ta = next(tm for tm in a.taskmanagers if tm.name == name)
    tb = next(tm for tm in b.taskmanagers if tm.name == name)
    assert ta.cgroup_cpu_s is not None and tb.cgroup_cpu_s is not None
    cores = (tb.cgroup_cpu_s - ta.cgroup_cpu_s) / dt
    throttled = ((tb.cgroup_throttled_s or 0.0) - (ta.cgroup_throttled_s or 0.0)) / dt
    rate = (b.counted() - a.counted()) / 8 / dt
    return cores, throttled, rate, tb.subtasks[0].work_ns_per_word / 1000.0
