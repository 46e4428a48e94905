"""The Flink engine's pure parts (testbed/flink): the rate schedule the job's source follows, the
settings' validation and the cluster's config, and reading the Prometheus reporter's text. Nothing
runs; tests/integration/test_flink_engine.py runs a real cluster."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from testbed.flink.cluster import last_error
from testbed.flink.metrics import MetricsFormatError, parse_prometheus, read_taskmanager, select
from testbed.flink.schedule import RateSchedule, ScheduleError, from_rates
from testbed.flink.settings import FlinkSettings, FlinkSettingsError, flink_config, from_mapping


# -- the rate schedule ------------------------------------------------------------------------------
def test_due_records_integrate_the_piecewise_rate():
    s = RateSchedule.of([(0, 100), (10, 50), (20, 0)])
    assert s.due_at(0) == 0 and s.due_at(-1) == 0
    assert s.due_at(0.5) == 50
    assert s.due_at(10) == 1000
    assert s.due_at(15) == 1250
    assert s.due_at(20) == 1500 and s.due_at(1e6) == 1500
    assert s.total() == 1500


def test_a_schedule_without_an_end_never_totals():
    assert RateSchedule.constant(10).total() == math.inf
    assert RateSchedule.constant(10, until_s=3).total() == 30


def test_schedule_file_is_one_time_rate_pair_per_line(tmp_path: Path):
    path = RateSchedule.of([(0, 200), (60.5, 0)]).write(tmp_path / "sub" / "schedule.txt")
    rows = [ln.split() for ln in path.read_text().splitlines() if not ln.startswith("#")]
    assert rows == [["0", "200"], ["60.5", "0"]]
    assert not list(tmp_path.glob("sub/*.tmp"))


@pytest.mark.parametrize("points, problem", [
    ([], "at least one point"),
    ([(1, 10)], "starts at time 0"),
    ([(0, -1)], "point 0: rate must be >= 0"),
    ([(0, 1), (5, 2), (5, 3)], "point 2: times must increase"),
    ([(0, math.nan)], "point 0: time and rate must be finite"),
    ([(0, 1), (math.inf, 0)], "point 1: time and rate must be finite"),
])
def test_invalid_schedules_name_the_point(points, problem):
    with pytest.raises(ScheduleError, match=problem):
        RateSchedule.of(points)


def test_per_second_rates_become_a_schedule_of_their_changes():
    s = from_rates([5, 5, 7, 7, 7, 0], step_s=2.0)
    assert s.times == (0.0, 4.0, 10.0) and s.rates == (5.0, 7.0, 0.0)
    assert s.total() == 5 * 4 + 7 * 6
    with pytest.raises(ScheduleError, match="step_s"):
        from_rates([1], step_s=0)


# -- settings ---------------------------------------------------------------------------------------
def test_default_settings_are_valid():
    assert FlinkSettings().validate().stop_mode == "graceful"


@pytest.mark.parametrize("values, key", [
    ({"stop_mode": "nice"}, "stop_mode"),
    ({"checkpoint_s": 0}, "checkpoint_s"),
    ({"cooldown_s": -1}, "cooldown_s"),
    ({"heartbeat_interval_s": 5, "heartbeat_timeout_s": 5}, "heartbeat_timeout_s"),
    ({"tm_memory_mb": 256}, "tm_memory_mb"),
    ({"vocabulary": 0}, "vocabulary"),
    ({"rescale_max_delay_s": -2}, "rescale_max_delay_s"),
    ({"work_us": -1}, "work_us"),
    ({"buffer_timeout_ms": -5}, "buffer_timeout_ms"),
    ({"start_timeout_s": math.inf}, "start_timeout_s"),
])
def test_a_bad_value_names_its_key(values, key):
    with pytest.raises(FlinkSettingsError, match=rf"^flink\.{key}: ") as err:
        from_mapping(values)
    assert err.value.key == key


def test_unknown_and_mistyped_keys_are_refused():
    with pytest.raises(FlinkSettingsError, match=r"^flink\.slots: unknown key"):
        from_mapping({"slots": 2})
    with pytest.raises(FlinkSettingsError, match=r"^flink\.jm_memory_mb: must be int"):
        from_mapping({"jm_memory_mb": "lots"})
    with pytest.raises(FlinkSettingsError, match=r"^flink\.tm_memory_mb: must be a whole number"):
        from_mapping({"tm_memory_mb": 768.5})
    with pytest.raises(FlinkSettingsError, match=r"^flink\.checkpoint_s: must be a number"):
        from_mapping({"checkpoint_s": True})


def test_mapping_values_are_converted():
    s = from_mapping({"checkpoint_s": "5", "tm_memory_mb": 1024.0, "flink_home": "/opt/flink", "stop_mode": "kill"})
    assert s.checkpoint_s == 5.0 and s.tm_memory_mb == 1024 and s.flink_home == Path("/opt/flink")
    assert s.as_dict()["flink_home"] == "/opt/flink"


def test_missing_installation_says_how_to_install(tmp_path: Path):
    with pytest.raises(FlinkSettingsError, match="infra/flink.sh install"):
        FlinkSettings(flink_home=tmp_path).check_installed()


def test_cluster_config_sets_reactive_mode_and_the_timings(tmp_path: Path):
    s = FlinkSettings(checkpoint_s=2.5, stabilization_s=1, cooldown_s=0, heartbeat_interval_s=1,
                      heartbeat_timeout_s=4, restart_delay_s=0.5, rescale_max_delay_s=3)
    conf = flink_config(s, tmp_path, "-Dx=1")
    assert conf["scheduler-mode"] == "reactive" and conf["taskmanager.numberOfTaskSlots"] == "1"
    assert conf["execution.checkpointing.interval"] == "2500 ms"
    assert conf["execution.checkpointing.dir"] == (tmp_path / "checkpoints").as_uri()
    assert conf["user.artifacts.base-dir"] == str(tmp_path / "artifacts")
    assert conf["jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout"] == "1000 ms"
    assert conf["jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout"] == "1000 ms"
    assert conf["jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling"] == "0 ms"
    assert conf["jobmanager.adaptive-scheduler.rescale-trigger.max-delay"] == "3000 ms"
    assert (conf["heartbeat.interval"], conf["heartbeat.timeout"]) == ("1000", "4000")
    assert conf["restart-strategy.fixed-delay.delay"] == "500 ms"
    assert conf["execution.buffer-timeout.interval"] == "100 ms"
    # scratch files in the cluster's folder: a killed process cannot clean up after itself in /tmp
    assert conf["io.tmp.dirs"] == str(tmp_path / "tmp")
    assert conf["env.java.opts.all"] == f"-Dx=1 -Djava.io.tmpdir={tmp_path / 'tmp'}"
    assert "jobmanager.adaptive-scheduler.rescale-trigger.max-delay" not in flink_config(FlinkSettings(), tmp_path, "")


# -- metrics ----------------------------------------------------------------------------------------
TM_TEXT = """\
# HELP flink_taskmanager_Status_JVM_CPU_Time Time (scope: taskmanager_Status_JVM_CPU)
# TYPE flink_taskmanager_Status_JVM_CPU_Time gauge
flink_taskmanager_Status_JVM_CPU_Time{host="localhost",tm_id="tm_1",} 9.64E9
flink_taskmanager_Status_JVM_CPU_Load{host="localhost",tm_id="tm_1",} 0.25
flink_taskmanager_Status_JVM_Memory_Heap_Used{host="localhost",tm_id="tm_1",} 1.048576E8
flink_taskmanager_job_task_busyTimeMsPerSecond{task_name="Source:_source",tm_id="tm_1",subtask_index="0",} 12.0
flink_taskmanager_job_task_busyTimeMsPerSecond{task_name="count____discard:_Writer",tm_id="tm_1",subtask_index="0",} 430.0
flink_taskmanager_job_task_operator_numRecordsIn{operator_name="count",task_name="count____discard:_Writer",subtask_index="0",} 20376.0
flink_taskmanager_job_task_operator_countedWords{operator_name="count",task_name="count____discard:_Writer",task_attempt_id="a_b_0_0",subtask_index="0",} 20000.0
flink_taskmanager_job_task_operator_latencyMs{operator_name="count",subtask_index="0",quantile="0.5",} 46.0
flink_taskmanager_job_task_operator_latencyMs{operator_name="count",subtask_index="0",quantile="0.95",} 96.0
flink_taskmanager_job_task_operator_latencyMs_count{operator_name="count",subtask_index="0",} 20376.0
flink_taskmanager_job_task_operator_latencySumMs{operator_name="count",subtask_index="0",} 3851622.0
flink_taskmanager_job_task_operator_scheduledRecords{operator_name="Source:_source",subtask_index="0",} 2550.0
flink_taskmanager_job_task_operator_emittedRecords{operator_name="Source:_source",subtask_index="0",} 2540.0
flink_taskmanager_job_task_operator_pendingRecords{operator_name="Source:_source",subtask_index="0",} 10.0
flink_taskmanager_job_task_operator_scheduleStartMs{operator_name="Source:_source",subtask_index="0",} 1.795637091291E12
"""


def test_prometheus_text_is_parsed_with_labels_and_values():
    samples = parse_prometheus(TM_TEXT)
    assert len(samples) == 15
    cpu = select(samples, "flink_taskmanager_Status_JVM_CPU_Time")[0]
    assert cpu.labels == {"host": "localhost", "tm_id": "tm_1"} and cpu.value == 9.64e9
    special = parse_prometheus('m{a="x\\"y"} NaN\nn +Inf 1700000000\n')
    assert special[0].labels == {"a": 'x"y'} and math.isnan(special[0].value) and special[1].value == math.inf


def test_a_malformed_line_is_refused_with_its_number():
    with pytest.raises(MetricsFormatError, match="line 2"):
        parse_prometheus("ok 1\nthis is not a metric\n")
    with pytest.raises(MetricsFormatError, match="line 1: not a number"):
        parse_prometheus("m{a=\"b\"} twelve\n")


def test_taskmanager_reading_has_the_counting_subtask_and_the_source():
    tm = read_taskmanager("tm-1", parse_prometheus(TM_TEXT))
    assert tm.cpu_time_s == pytest.approx(9.64) and tm.cpu_load == 0.25 and tm.heap_used_mb == pytest.approx(100.0)
    (st,) = tm.subtasks
    assert ((st.subtask, st.attempt, st.records_in, st.counted, st.busy_ms_per_s)
            == (0, "a_b_0_0", 20376.0, 20000.0, 430.0))
    assert (st.latency_p50_ms, st.latency_p95_ms, st.latency_sum_ms) == (46.0, 96.0, 3851622.0)
    assert (tm.source.scheduled, tm.source.emitted, tm.source.pending) == (2550.0, 2540.0, 10.0)


def test_a_taskmanager_without_the_source_or_the_job():
    text = "\n".join(ln for ln in TM_TEXT.splitlines() if "Source" not in ln)
    assert read_taskmanager("tm-2", parse_prometheus(text)).source is None
    bare = read_taskmanager("tm-3", parse_prometheus('flink_taskmanager_Status_JVM_CPU_Load{tm_id="tm_3"} 0.1\n'))
    assert bare.subtasks == () and bare.source is None and bare.cpu_time_s is None


def test_last_error_prefers_an_exception_line(tmp_path: Path):
    log = tmp_path / "tm.out"
    log.write_text("INFO starting\nException in thread main: memory\n\tat x\nINFO bye\n")
    assert last_error(log) == "Exception in thread main: memory"
    assert last_error(tmp_path / "none") == "no log"


# -- processes (with `sleep` standing in for a JVM: what matters is the pid bookkeeping) ------------
def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_stopping_processes_gracefully_and_at_once(tmp_path: Path):
    from testbed.flink import processes

    a = processes.launch("a", ["sleep", "60"], {"PATH": "/usr/bin:/bin"}, tmp_path / "a.out", 0)
    b = processes.launch("b", ["sleep", "60"], {"PATH": "/usr/bin:/bin"}, tmp_path / "b.out", 0)
    assert {a.pid, b.pid} <= set(processes.live_pids()) and a.rss_mb() is not None and a.cpu_s() is not None
    assert processes.stop(a, graceful=True, timeout_s=5) < 5
    processes.stop_all([b], timeout_s=5)
    assert not a.alive() and not b.alive() and not {a.pid, b.pid} & set(processes.live_pids())
    assert a.rss_mb() is None


def test_a_killed_controller_takes_its_processes_along(tmp_path: Path):
    import subprocess
    import sys

    code = ("import sys, time; from pathlib import Path; from testbed.flink import processes; "
            "p = processes.launch('x', ['sleep', '60'], {'PATH': '/usr/bin:/bin'}, Path(sys.argv[1]), 0); "
            "print(p.pid, flush=True); time.sleep(60)")
    root = Path(__file__).resolve().parents[2]
    ctl = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "x.out")], stdout=subprocess.PIPE, text=True,
                           cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    pid = int(ctl.stdout.readline())
    ctl.kill()
    ctl.wait()
    assert _gone(pid), "the child outlived its killed controller"


# -- rates between readings -------------------------------------------------------------------------
def _tm(name, cpu_s, subtasks, source=None):
    from testbed.flink.metrics import TaskManagerReading

    return TaskManagerReading(name, 0.1, cpu_s, 100.0, tuple(subtasks), source)


def _st(attempt, records_in, busy=500.0):
    from testbed.flink.metrics import SubtaskReading

    return SubtaskReading(0, attempt, records_in, records_in, busy, 1.0, 2.0, 0.0)


def test_rates_between_two_readings():
    from testbed.flink.metrics import JobReading, SourceReading, rates

    src0, src1 = SourceReading(1000, 990, 10, 0), SourceReading(1200, 1150, 50, 0)
    prev = JobReading(10.0, "RUNNING", 2, ("tm-1", "tm-2"),
                      (_tm("tm-1", 5.0, [_st("a", 800)], src0), _tm("tm-2", 3.0, [_st("b", 400)])), src0)
    cur = JobReading(12.0, "RUNNING", 2, ("tm-1", "tm-2", "tm-3"),
                     (_tm("tm-1", 6.0, [_st("a", 1800, 900)], src1), _tm("tm-2", 4.5, [_st("c", 300)]),
                      _tm("tm-3", 1.0, [_st("d", 10)])), src1)
    assert cur.backlog(8) == 1200 - (1800 + 300 + 10) / 8
    assert JobReading(0.0, "NONE", 0, ()).backlog(8) != JobReading(0.0, "NONE", 0, ()).backlog(8)  # NaN
    r = rates(prev, cur)
    assert (r.dt, r.workload, r.emitted, r.lag) == (2.0, 100.0, 80.0, 50)
    assert r.throughput == {"tm-1": 500.0, "tm-2": 150.0}  # tm-2 restarted: its new attempt counts from 0
    assert r.cpu == {"tm-1": 0.5, "tm-2": 0.75} and r.busy == {"tm-1": 0.9, "tm-2": 0.5}
    with pytest.raises(ValueError, match="out of order"):
        rates(cur, prev)


def test_a_cluster_records_its_settings_before_anything_runs(tmp_path: Path):
    from testbed.flink.cluster import FlinkCluster

    cluster = FlinkCluster(FlinkSettings(stop_mode="kill", heartbeat_timeout_s=8), RateSchedule.constant(5, 10),
                           tmp_path)
    rec = cluster.record()
    assert rec["flink_version"] == "2.3.0" and rec["settings"]["stop_mode"] == "kill"
    assert rec["settings"]["heartbeat_timeout_s"] == 8
    assert rec["schedule"] == {"times": [0.0, 10.0], "rates": [5.0, 0.0]}
    assert rec["processes"] == {} and cluster.pids() == []
    cluster.close()  # nothing to stop
    with pytest.raises(FlinkSettingsError, match="stop_mode"):
        FlinkCluster(FlinkSettings(stop_mode="soft"), RateSchedule.constant(1), tmp_path)
