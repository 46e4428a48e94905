"""The machine's load from other processes beside a live run (testbed/live/machine_load.py)."""
from __future__ import annotations

import pytest

from testbed.live import machine_load as ml


def test_other_is_the_machine_less_the_runs_containers_testbed_and_services():
    readings = iter([ml.Readings(100.0, 10.0, 5.0), ml.Readings(130.0, 11.5, 6.5), ml.Readings(145.0, 12.0, 7.0)])
    load = ml.MachineLoad(read=lambda: next(readings), cpus=2)
    load.start(0.0)
    load.interval(15.0, containers_cpu_ms=15000)  # 2 cores busy: 1 the containers, 0.1 + 0.1 the rest
    load.interval(30.0, containers_cpu_ms=None)  # no container reported: counted as 0, and said so
    first, second = load.intervals
    assert (first.machine, first.containers, first.testbed, first.services) == pytest.approx((2.0, 1.0, 0.1, 0.1))
    assert first.other == pytest.approx(0.8) and second.other == pytest.approx(1.0 - 1 / 30 - 1 / 30)
    s = load.summary()
    assert s["cpus"] == 2 and s["intervals"] == 2 and s["containers_unreported_intervals"] == 1
    assert s["other_cores"]["max"] == pytest.approx(0.933) and s["machine_cores"]["mean"] == pytest.approx(1.5)
    assert s["other_cores_by_interval"][0] == [15.0, 0.8]


def test_without_proc_stat_nothing_is_recorded_and_the_manifest_says_why():
    load = ml.MachineLoad(read=lambda: ml.Readings(None, 0.0, 0.0))
    load.start(0.0)
    load.interval(15.0, 100)
    assert load.intervals == [] and "no /proc/stat" in str(load.summary()["unreadable"])


def test_proc_stat_and_process_cpu_are_read(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 1000 50 5 5 10 0 0\ncpu0 1 2 3 4\n")
    assert ml.machine_busy_s(str(stat)) == pytest.approx((100 + 20 + 30 + 5 + 5 + 10) / ml.CLOCK_TICKS)
    assert ml.machine_busy_s(str(tmp_path / "none")) is None
    for pid, name, ticks in (("7", "redis-server", 40), ("8", "python3", 500)):
        (tmp_path / pid).mkdir()
        fields = ["S"] + ["0"] * 10 + [str(ticks), "2"] + ["0"] * 30
        (tmp_path / pid / "stat").write_text(f"{pid} ({name}) " + " ".join(fields))
    assert ml.services_cpu_s(str(tmp_path)) == pytest.approx(42 / ml.CLOCK_TICKS)  # not python3
    assert ml.own_cpu_s() > 0 and ml.read_now().machine is not None
