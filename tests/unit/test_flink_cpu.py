"""The Flink cpu mode's parts (docs/flink.md#cpu-mode): its settings, the work calibration's output
and rounds, the cgroup hierarchy found from the mounts, the limit's files, the usage's parsing, the
cgroup usage in the readings; and, where this machine lets a root process make cgroups, a real one
limiting a busy shell (standing in for a JVM) and removed after it was killed.
tests/integration/test_flink_cpu.py runs a TaskManager under its limit."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.flink import processes
from testbed.flink.cgroups import (
    BASE,
    CgroupError,
    ClusterCgroups,
    Hierarchy,
    Mount,
    choose,
    detect,
    limit_files,
    owner_pid,
    parse_mounts,
    parse_usage,
    quota_us,
    sweep,
)
from testbed.flink.metrics import JobReading, TaskManagerReading, parse_prometheus, rates, read_taskmanager
from testbed.flink.settings import FlinkSettings, FlinkSettingsError, from_mapping
from testbed.flink.work import WordCost, parse_calibration, rounds_for, word_cost

CPU = {"mode": "cpu", "tm_cpu_limit": 0.5, "work_us": 2000}


# -- settings ---------------------------------------------------------------------------------------
def test_the_wait_mode_stays_the_default():
    s = FlinkSettings().validate()
    assert s.mode == "wait" and not s.cpu_limited and s.tm_cpu_limit == 0


def test_cpu_mode_settings():
    s = from_mapping({**CPU, "tm_cpu_limit": "0.25"})
    assert s.cpu_limited and s.tm_cpu_limit == 0.25 and s.work_us == 2000.0
    assert from_mapping({"mode": "cpu", "tm_cpu_limit": 1, "work_rounds": 5000}).work_rounds == 5000


@pytest.mark.parametrize("values, key, problem", [
    ({"mode": "pod"}, "mode", "must be one of wait, cpu"),
    ({"mode": "cpu", "work_us": 100}, "tm_cpu_limit", "needs a CPU limit of at least 0.01"),
    ({**CPU, "tm_cpu_limit": 0.005}, "tm_cpu_limit", "at least 0.01"),
    ({**CPU, "work_us": 0}, "work_us", "needs CPU work per word"),
    ({**CPU, "wait_us": 5000}, "wait_us", "does not wait"),
    ({"wait_us": 5000, "tm_cpu_limit": 0.5}, "tm_cpu_limit", "the cpu mode's"),
    ({**CPU, "tm_cpu_limit": -1}, "tm_cpu_limit", "must be >= 0"),
    ({**CPU, "work_us": math.nan}, "work_us", "must be >= 0"),
    ({**CPU, "work_rounds": -3}, "work_rounds", "must be >= 0"),
    ({**CPU, "work_rounds": 2.5}, "work_rounds", "whole number"),
])
def test_a_bad_cpu_setting_names_its_key(values, key, problem):
    with pytest.raises(FlinkSettingsError, match=rf"^flink\.{key}: .*{problem}") as err:
        from_mapping(values)
    assert err.value.key == key


# -- the work per word ------------------------------------------------------------------------------
def test_the_calibration_line_is_read_and_gives_the_rounds():
    c = parse_calibration("OpenJDK warning\nns_per_round=2.241210 min=2.214935 max=2.252174 sink=1\n")
    assert (c.ns_per_round, c.min_ns, c.max_ns) == (2.24121, 2.214935, 2.252174)
    assert rounds_for(2000, c.ns_per_round) == 892375
    assert rounds_for(0.0001, 3.0) == 1
    for bad in ("", "rounds=12\n", "ns_per_round=0 min=0 max=0\n"):
        with pytest.raises(ValueError):
            parse_calibration(bad)


def test_given_rounds_need_no_calibration_and_no_work_none():
    given = word_cost(FlinkSettings(mode="cpu", tm_cpu_limit=0.5, work_rounds=700))
    assert given.rounds == 700 and math.isnan(given.work_us) and given.calibration is None
    assert word_cost(FlinkSettings()) == WordCost(0, 0.0)
    assert word_cost(FlinkSettings()).as_dict() == {"rounds": 0, "work_us": 0.0, "calibration": None}


# -- cgroups: the pure parts ------------------------------------------------------------------------
HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
/dev/vda / ext4 rw 0 0
"""
COMOUNTED = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0\n"
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_the_mounts_give_the_cpu_hierarchy():
    mounts = parse_mounts(HYBRID)
    assert [m.fstype for m in mounts] == ["cgroup", "cgroup", "cgroup", "cgroup2"]
    assert mounts[0] == Mount(Path("/sys/fs/cgroup/cpu"), "cgroup", ("rw", "relatime", "cpu"))
    # v2 without its cpu controller (bound to v1 here): v1's cpu and cpuacct
    assert choose(mounts, {Path("/sys/fs/cgroup/unified"): ""}) == Hierarchy(
        1, Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpuacct"))
    assert choose(parse_mounts(COMOUNTED), {}) == Hierarchy(
        1, Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct"))
    unified = parse_mounts(UNIFIED)
    assert choose(unified, {Path("/sys/fs/cgroup"): "cpuset cpu io memory pids\n"}) == Hierarchy(
        2, Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup"))
    assert choose(unified, {Path("/sys/fs/cgroup"): "memory pids"}) is None
    assert choose(parse_mounts("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"), {}) is None  # no usage to read
    assert parse_mounts("cgroup /a\\040b cgroup rw,cpu 0 0")[0].path == Path("/a b")


def test_the_limit_is_a_quota_per_period():
    assert quota_us(0.5) == 50_000 and quota_us(0.001) == 1000 and quota_us(2.0, 50_000) == 100_000
    assert limit_files(2, 0.5) == [("cpu.max", "50000 100000")]
    assert limit_files(1, 0.25) == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "25000")]


def test_usage_from_either_version():
    v2 = ("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 12\n"
          "throttled_usec 600000\n")
    assert parse_usage(2, v2) == parse_usage(1, "nr_periods 40\nnr_throttled 12\nthrottled_time 600000000\n",
                                             "2500000000\n")
    assert parse_usage(2, v2).cpu_s == 2.5 and parse_usage(2, v2).throttled_s == 0.6
    with pytest.raises(CgroupError, match="v2"):
        parse_usage(2, "nr_periods 1\n")
    with pytest.raises(CgroupError, match="v1"):
        parse_usage(1, "nr_periods 1\n", "")


def test_a_cluster_cgroup_is_named_by_its_controller():
    assert owner_pid("4242-3f2a9c0d1e2f") == 4242
    assert owner_pid("cpu.stat") is None and owner_pid("x-1") is None


# -- the readings -----------------------------------------------------------------------------------
WORK_TEXT = """\
flink_taskmanager_Status_JVM_CPU_Time{tm_id="tm_1"} 1.0E9
flink_taskmanager_job_task_operator_countedWords{operator_name="count",task_attempt_id="a",subtask_index="0",} 100.0
flink_taskmanager_job_task_operator_numRecordsIn{operator_name="count",subtask_index="0",} 100.0
flink_taskmanager_job_task_operator_workNanosPerWord{operator_name="count",subtask_index="0",} 2012345.5
"""


def test_the_readings_carry_the_work_cost_and_the_cgroup_cpu():
    tm = read_taskmanager("tm-1", parse_prometheus(WORK_TEXT))
    assert tm.subtasks[0].work_ns_per_word == 2012345.5 and tm.cgroup_cpu_s is None
    a = JobReading(10.0, "RUNNING", 1, ("tm-1",), (TaskManagerReading("tm-1", None, 1.0, None, (),
                                                                      cgroup_cpu_s=4.0),))
    b = JobReading(12.0, "RUNNING", 1, ("tm-1",), (TaskManagerReading("tm-1", None, 2.0, None, (),
                                                                      cgroup_cpu_s=5.0),))
    r = rates(a, b)
    assert r.cgroup_cpu == {"tm-1": 0.5} and r.cpu == {"tm-1": 0.5}
    assert rates(a, JobReading(12.0, "RUNNING", 1, ("tm-1",), (TaskManagerReading("tm-1", None, 2.0, None),))
                 ).cgroup_cpu == {}


# -- a real cgroup, where this machine allows one ---------------------------------------------------
def _hierarchy() -> Hierarchy:
    try:
        found = detect()
    except (CgroupError, OSError) as e:
        pytest.skip(f"no cgroup CPU hierarchy here: {e}")
    if not os.access(found.cpu, os.W_OK):
        pytest.skip(f"{found.cpu} is not writable (needs root)")
    return found


def _busy(tmp_path: Path, joins) -> processes.FlinkProcess:
    return processes.launch("busy", [sys.executable, "-c", "while True: pass"], {"PATH": "/usr/bin:/bin"},
                            tmp_path / "busy.out", 0, joins)


def test_a_real_cgroup_limits_its_process_and_goes_when_it_was_killed(tmp_path: Path):
    h = _hierarchy()
    cg = ClusterCgroups(h, "unit-limit", 0.2)
    cg.create()
    try:
        joins = cg.add("tm-1")
        proc = _busy(tmp_path, joins)
        try:
            time.sleep(0.3)
            u0, t0 = cg.usage("tm-1"), time.monotonic()
            time.sleep(1.0)
            u1, t1 = cg.usage("tm-1"), time.monotonic()
            assert u0 is not None and u1 is not None
            cores = (u1.cpu_s - u0.cpu_s) / (t1 - t0)
            assert cores <= 0.2 * 1.15, f"{cores:.3f} cores used under a 0.2-core limit"
            assert u1.throttled > u0.throttled  # a busy loop hits its quota every period
            assert f"/{BASE}/{cg.name}/tm-1" in Path(f"/proc/{proc.pid}/cgroup").read_text()
        finally:
            os.kill(proc.pid, signal.SIGKILL)  # behind the cgroups' back, as a crashed TaskManager
            processes.stop(proc, graceful=False, timeout_s=0)
        assert cg.remove("tm-1") and cg.final["tm-1"].cpu_s >= u1.cpu_s
        assert cg.usage("tm-1") == cg.final["tm-1"]  # the last usage stays readable
        assert not any(d.exists() for d in (p.parent for p in joins))
    finally:
        assert cg.close()
    assert not any(d.exists() for d in cg.paths())


def test_a_dead_controllers_cgroups_are_swept_and_a_live_ones_kept(tmp_path: Path):
    h = _hierarchy()
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid names a controller that has exited
    stale = [root / BASE / f"{dead.pid}-stale" / "tm-1" for root in dict.fromkeys((h.cpu, h.acct))]
    mine = ClusterCgroups(h, "unit-sweep", 0.1)
    mine.create()
    try:
        for d in stale:
            d.mkdir(parents=True)
        removed = sweep(h)
        assert {p.name for p in removed} == {f"{dead.pid}-stale"}
        assert not any(d.parent.exists() for d in stale) and all(d.exists() for d in mine.paths())
    finally:
        for d in stale:
            for p in (d, d.parent):
                if p.exists():
                    p.rmdir()
        mine.close()
