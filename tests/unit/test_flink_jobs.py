"""The three jobs on Flink (testbed/flink/jobs.py, flink/jobs/): which job a workload runs on and
its configuration's checks, where each job's metrics are read (the YSB job's reporter text below),
and a windowed job's run on the fake Flink of tests/unit/flink_fakes.py: its accounting balances only
once every window has fired. Nothing runs; tests/integration/test_flink_jobs.py runs the real jobs."""
from __future__ import annotations

import math

import pytest

from testbed.arguments import ConfigError
from testbed.flink.jobs import JOBS, TRAFFIC, WORDCOUNT, YSB
from testbed.flink.metrics import JobReading, parse_prometheus, read_taskmanager
from testbed.flink.settings import FlinkSettings, FlinkSettingsError, from_mapping
from testbed.live.flink_job import Accounting
from tests.conftest import compose_config
from tests.unit.flink_fakes import FakeFlink
from tests.unit.test_flink_faults import make_run


# -- job selection and its checks ---------------------------------------------------------------------
@pytest.mark.parametrize("workload, job, rate", [
    ("wc_sine", "wordcount", 25.0), ("ysb_avazu", "ysb", 190.0), ("tm_two_spike", "traffic", 190.0),
])
def test_each_workload_runs_on_its_own_job_at_that_jobs_rate(workload, job, rate, tmp_path):
    cfg = compose_config("evaluation=daedalus_flink", f"pattern={workload}", f"out={tmp_path}")
    assert cfg.backend.flink.job_for(workload) == job and cfg.backend.flink.rate_of(job) == rate


def test_a_workload_without_a_job_fails_before_anything_starts_naming_the_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", "pattern=ysb_avazu", "~backend.flink.jobs.ysb_avazu",
                       f"out={tmp_path}")
    assert err.value.key == "backend.flink.jobs" and "'ysb_avazu'" in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("backend.flink.jobs.wc_sine=grep", "backend.flink.jobs.wc_sine"),
    ("+backend.flink.tm_rates.sort=10", "backend.flink.tm_rates.sort"),
    ("backend.flink.tm_rates.ysb=0", "backend.flink.tm_rates.ysb"),
    ("+backend.flink.settings.job=ysb", "backend.flink.settings.job"),
])
def test_bad_job_settings_are_named(override, key, tmp_path):
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=daedalus_flink", f"out={tmp_path}", override)
    assert err.value.key == key, str(err.value)


def test_the_settings_name_the_job_and_its_units():
    assert FlinkSettings().spec is WORDCOUNT and FlinkSettings().units == 8
    assert from_mapping({"job": "ysb"}).spec is YSB
    assert from_mapping({"job": "traffic", "words_per_sentence": 3}).units == 1
    with pytest.raises(FlinkSettingsError, match=r"^flink\.job: must be one of wordcount, ysb, traffic"):
        from_mapping({"job": "grep"})
    assert {j.job_class.rsplit(".", 1)[1] for j in JOBS.values()} == {"WordCountJob", "YsbJob", "TrafficJob"}


# -- reading a windowed job's metrics ---------------------------------------------------------------------
YSB_TEXT = """\
flink_taskmanager_Status_JVM_CPU_Time{host="localhost",tm_id="tm_1",} 9.64E9
flink_taskmanager_job_task_busyTimeMsPerSecond{task_name="Source:_source",subtask_index="0",} 12.0
flink_taskmanager_job_task_busyTimeMsPerSecond{task_name="parse____filter____project____join",subtask_index="1",} 610.0
flink_taskmanager_job_task_busyTimeMsPerSecond{task_name="count____sink____discard:_Writer",subtask_index="0",} 20.0
flink_taskmanager_job_task_operator_numRecordsIn{operator_name="parse",task_attempt_id="p1",subtask_index="1",} 3000.0
flink_taskmanager_job_task_operator_workNanosPerWord{operator_name="parse",subtask_index="1",} 1.9E6
flink_taskmanager_job_task_operator_droppedRecords{operator_name="filter",subtask_index="1",} 1980.0
flink_taskmanager_job_task_operator_numRecordsIn{operator_name="count",task_attempt_id="c0",subtask_index="0",} 1040.0
flink_taskmanager_job_task_operator_countedRecords{operator_name="count",task_attempt_id="c0",subtask_index="0",} 1000.0
flink_taskmanager_job_task_operator_latencyMs{operator_name="count",subtask_index="0",quantile="0.5",} 40.0
flink_taskmanager_job_task_operator_latencyMs{operator_name="count",subtask_index="0",quantile="0.95",} 90.0
flink_taskmanager_job_task_operator_latencySumMs{operator_name="count",subtask_index="0",} 52000.0
flink_taskmanager_job_task_operator_windowedRecords{operator_name="sink",subtask_index="0",} 900.0
flink_taskmanager_job_task_operator_scheduledRecords{operator_name="Source:_source",subtask_index="0",} 3010.0
flink_taskmanager_job_task_operator_emittedRecords{operator_name="Source:_source",subtask_index="0",} 3005.0
"""


def test_a_windowed_jobs_reading_takes_each_figure_from_its_operator():
    tm = read_taskmanager("tm-1", parse_prometheus(YSB_TEXT), YSB)
    (st,) = tm.subtasks
    # the working operator (every event, its cost): its subtask, attempt, records and task's busy time
    assert (st.subtask, st.attempt, st.records_in, st.busy_ms_per_s) == (1, "p1", 3000.0, 610.0)
    assert st.work_ns_per_word == 1.9e6
    # counted once: what the window admitted plus what the filter let go; latency where it was admitted
    assert st.counted == 1000.0 + 1980.0 and (tm.dropped, tm.windowed) == (1980.0, 900.0)
    assert (st.latency_p50_ms, st.latency_p95_ms, st.latency_sum_ms, st.latency_n) == (40.0, 90.0, 52000.0, 1040.0)
    job = JobReading(1.0, "RUNNING", 1, ("tm-1",), (tm,), tm.source)
    assert job.counted() == 2980.0 and job.admitted() == 1000.0 and job.windowed() == 900.0
    assert job.backlog(1) == 3010.0 - 2980.0


def test_wordcounts_reading_is_unchanged_by_the_job_specs():
    from tests.unit.test_flink_engine import TM_TEXT

    (st,) = read_taskmanager("tm-1", parse_prometheus(TM_TEXT)).subtasks
    assert (st.attempt, st.records_in, st.counted, st.busy_ms_per_s) == ("a_b_0_0", 20376.0, 20000.0, 430.0)
    assert math.isnan(st.latency_records) and st.latency_n == 20376.0
    assert read_taskmanager("tm-1", parse_prometheus(TM_TEXT), TRAFFIC).subtasks == ()  # no such operators


# -- a windowed job's run and its accounting ------------------------------------------------------------
def test_a_window_that_did_not_fire_does_not_balance():
    done = Accounting(100, 100, 100, 0, 0, True, "ysb", admitted=34, windowed=34)
    assert done.imbalances() == {"counted - scheduled": 0, "emitted - scheduled": 0, "windowed - admitted": 0}
    short = Accounting(100, 100, 100, 0, 0, True, "ysb", admitted=34, windowed=30)
    assert short.imbalances()["windowed - admitted"] == -4
    assert "windowed - admitted" not in Accounting(100, 100, 100, 0, 0, True).imbalances()  # WordCount


def _windowed(fake: FakeFlink) -> None:
    fake.wps, fake.windows = 1, True


def test_ysb_on_the_fake_flink_counts_every_event_once_and_names_its_job(tmp_path):
    run, result, fake = make_run(tmp_path, "pattern=ysb_avazu", setup=_windowed)
    assert result.incomplete is None, result.incomplete
    acc = result.details["accounting"]
    assert acc["job"] == "ysb" and acc["drained"] and acc["counted"] == acc["scheduled"] > 0
    assert acc["windowed"] == acc["admitted"] == acc["scheduled"] / 2  # the fake's filter lets half go
    assert result.details["job"]["flink_job"] == "ysb" and result.details["job"]["mu"] == 190.0
    assert run.settings.job == "ysb" and run.wps == 1


def test_windows_that_never_fire_leave_the_run_incomplete(tmp_path):
    def setup(fake: FakeFlink) -> None:
        _windowed(fake)
        fake.windows_stop_at = 1030.0

    _, result, _ = make_run(tmp_path, "pattern=tm_two_spike", "backend.flink.drain_timeout_s=5", setup=setup)
    assert result.incomplete is not None and "drain did not finish" in result.incomplete
    assert result.details["accounting"]["job"] == "traffic"
