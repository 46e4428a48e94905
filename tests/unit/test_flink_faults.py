"""The Flink job-mode run facing its engine's faults (testbed/live/flink_job.py, testbed/flink/faults.py)
against a fake clock and a fake reactive-mode Flink (tests/unit/flink_fakes.py): a lost TaskManager
is found, recorded and replaced, a change that cannot finish is given up, and a run is complete only
when its drain finished and its accounting balances (`execute` marks the manifest so). The same
faults on a real Flink: tests/integration/test_flink_faults.py."""
from __future__ import annotations

import math
from typing import Callable, List, Optional

import numpy as np
import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import (
    build_pattern,
    config_for,
    execute,
    failure_reason,
    incomplete_runs,
    plan_runs,
    policy_for,
)
from testbed.flink.faults import (
    START_FAILURES,
    Loss,
    change_bound_s,
    exit_status,
    find_losses,
    root_cause,
    start_failure,
    unregistered,
    why_not_started,
)
from testbed.flink.settings import FlinkSettings
from testbed.live.flink_job import FlinkJobRun
from testbed.model import ScaleTo
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR
from testbed.run_result import RunResult, verdict
from testbed.sim.job import JobSimulation
from tests.conftest import compose_config

from .flink_fakes import FakeClock, FakeFlink


class Scripted(Policy):
    """Starts at `n0` TaskManagers and asks for `target` at its first decision."""

    name = "scripted"
    interval_s = 1.0

    def __init__(self, n0: int, target: Optional[int] = None):
        self.n0, self.target = n0, target

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return self.n0

    def decide_job(self, snapshot) -> List:
        return [ScaleTo(JOB_OPERATOR, self.target, "scripted")] if self.target else []


def make_run(tmp_path, *overrides: str, policy: Optional[Policy] = None,
             setup: Callable[[FakeFlink], None] = lambda fake: None) -> tuple:
    cfg = compose_config("evaluation=daedalus_flink", "evaluation.only=[static-2]", "reps=1", "duration_min=72",
                         f"out={tmp_path}", *overrides)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    clock = FakeClock()
    fakes: List[FakeFlink] = []

    def engine(settings: FlinkSettings, schedule):
        fake = FakeFlink(clock, schedule, heartbeat_s=settings.heartbeat_timeout_s)
        setup(fake)
        fakes.append(fake)
        return fake

    run = FlinkJobRun(run_cfg, policy or policy_for(run_cfg), build_pattern(run_cfg.pattern, cfg.seed),
                      "fake/run/1", engine=engine, clock=clock)
    result = run.run()
    return run, result, fakes[0]


SHORT_HEARTBEAT = ("+backend.flink.settings.heartbeat_timeout_s=5", "+backend.flink.settings.heartbeat_interval_s=1")
T0 = 1012.0  # the fake job first runs at 2 TaskManagers (registered after 10 s, restarted 2 s later)


def actions(result: RunResult) -> pd.DataFrame:
    return pd.DataFrame(result.tables["actions"])


def instances(result: RunResult) -> pd.DataFrame:
    return pd.DataFrame(result.tables["instances"])


def test_a_killed_taskmanager_is_found_recorded_replaced_and_the_run_balances(tmp_path):
    run, result, fake = make_run(tmp_path, setup=lambda f: f.kills.append((T0 + 20.5, "tm-1")))
    assert result.incomplete is None, result.incomplete
    [rec] = result.details["recoveries"]
    assert rec["taskmanager"] == "tm-1" and rec["replaced_by"] == "tm-3"
    assert "killed by SIGKILL" in rec["why"]
    assert 10 <= rec["downtime_s"] <= 15  # the replacement's start and the restart
    assert rec["replayed"] == pytest.approx(2 * fake.replay)  # down to one, back to two TaskManagers
    replace = actions(result).query("action == 'replace'")
    assert list(replace.instance) == ["tm-1"] and "SIGKILL" in replace.reason.iloc[0]
    inst = instances(result)
    gap = inst[(inst.t_s > 22) & (inst.t_s < 30)]
    assert (gap.instances == 1).all() and (gap.starting == 1).all()  # the job ran on with one
    assert inst.instances.iloc[-1] == 2  # and with two again
    acc = result.details["accounting"]
    assert acc["drained"] and acc["counted"] == acc["scheduled"] and acc["replays"] == 2 * fake.replay
    assert ("tm-1", "kill") in fake.removed and fake.closed
    assert result.details["parallelism"] == {"mode": "job", "scheduler": "reactive"}  # how decisions were applied


def test_seconds_without_the_source_metrics_lose_no_arrivals(tmp_path):
    """A reading without the source's metrics counts no arrivals; the next one with them counts the
    arrivals of both seconds, so the arrivals recorded still add up to what the schedule made due."""
    missing = (T0 + 20.5, T0 + 23.5)
    run, result, fake = make_run(tmp_path, setup=lambda f: f.source_missing.append(missing))
    assert result.incomplete is None, result.incomplete
    arrivals, t0 = run.loop.series.arrivals, run.loop.t0
    gap = [k for k in range(len(arrivals)) if missing[0] <= t0 + k + 1 < missing[1]]  # row k read at t0 + k + 1
    assert len(gap) == 3 and all(arrivals[k] == 0 for k in gap)
    assert arrivals[gap[-1] + 1] > arrivals[gap[0] - 1]  # the next second counts the gap's arrivals too
    assert arrivals.sum() == pytest.approx(result.details["accounting"]["scheduled"])


CPU_MODE = ("backend=flink_cpu",)


@pytest.mark.parametrize("reading, expected", [("busy", 0.5), ("cgroup", 0.8)])
def test_the_controllers_read_busy_time_or_the_cgroups_cpu_over_its_limit(tmp_path, reading, expected):
    """Busy time is the counting task's (500 ms/s in the fake); the cgroup's reading is the
    TaskManager's CPU over its limit (0.4 of 0.5 cores), as a pod's utilisation is to Kubernetes."""
    def setup(fake: FakeFlink) -> None:
        fake.cgroup_cores = 0.4

    run, result, fake = make_run(tmp_path, *CPU_MODE, f"backend.flink.settings.cpu_reading={reading}",
                                 setup=setup)
    assert result.incomplete is None, result.incomplete
    cpu = run.loop.series.cpu
    read = cpu[~np.isnan(cpu)]
    assert read.size > 0 and read == pytest.approx(expected)


def test_the_cgroup_reading_needs_the_cpu_mode():
    with pytest.raises(ValueError, match=r"flink.cpu_reading: .*mode=cpu"):
        FlinkSettings(cpu_reading="cgroup").validate()
    with pytest.raises(ValueError, match=r"flink.cpu_reading: must be one of busy, cgroup"):
        FlinkSettings(cpu_reading="jvm").validate()


def test_the_only_taskmanager_lost_is_replaced_and_its_sentences_counted(tmp_path):
    run, result, fake = make_run(tmp_path, policy=Scripted(1),
                                 setup=lambda f: f.kills.append((T0 + 30.5, "tm-1")))
    assert result.incomplete is None, result.incomplete
    [rec] = result.details["recoveries"]
    assert rec["taskmanager"] == "tm-1" and rec["replaced_by"] == "tm-2"
    inst = instances(result)
    gap = inst[(inst.t_s > 32) & (inst.t_s < 42)]
    assert (gap.instances == 0).all() and (gap.starting == 1).all()
    acc = result.details["accounting"]
    assert acc["drained"] and acc["pending"] == 0 and acc["replays"] == fake.replay


def test_a_frozen_taskmanager_is_killed_and_replaced_once_flink_drops_it(tmp_path):
    run, result, fake = make_run(tmp_path, *SHORT_HEARTBEAT,
                                 setup=lambda f: f.freezes.append((T0 + 20.5, "tm-2")))
    assert result.incomplete is None, result.incomplete
    [rec] = result.details["recoveries"]
    assert rec["taskmanager"] == "tm-2" and "heartbeat timeout" in rec["why"]
    assert 25 <= rec["t_s"] <= 27  # frozen at 20.5, dropped 5 s later, found at the next reading
    assert ("tm-2", "kill") in fake.removed  # the frozen process is killed, not left behind


def test_a_rescale_that_cannot_finish_is_given_up_and_its_stuck_taskmanager_replaced(tmp_path):
    def setup(fake: FakeFlink) -> None:
        fake.hangs.add(2)  # the scale-out's TaskManager never registers

    run, result, fake = make_run(tmp_path, *SHORT_HEARTBEAT, policy=Scripted(1, 2), setup=setup)
    assert result.incomplete is None, result.incomplete
    [given_up] = result.details["given_up"]
    bound = change_bound_s(run.slowest_start_s, run.settings)
    assert given_up["rescale"] == 0 and given_up["t_s"] == pytest.approx(1 + math.ceil(bound), abs=1)
    assert "did not run at 2 TaskManager(s)" in given_up["reason"]
    [rec] = result.details["recoveries"]
    assert rec["taskmanager"] == "tm-2" and "not registered" in rec["why"] and rec["replaced_by"] == "tm-3"
    assert math.isnan(result.tables["rescales"]["downtime_s"][0])  # that rescale never finished
    assert instances(result).instances.iloc[-1] == 2  # the replacement brought the job to two


def test_a_drain_that_cannot_finish_makes_the_run_incomplete(tmp_path):
    run, result, fake = make_run(tmp_path, "backend.flink.drain_timeout_s=5",
                                 setup=lambda f: setattr(f, "stall_at", T0 + 55))
    assert result.incomplete and "the drain did not finish" in result.incomplete, result.incomplete
    assert not result.details["accounting"]["drained"]


def test_losses_past_the_budget_end_the_run_incomplete(tmp_path):
    def setup(fake: FakeFlink) -> None:
        fake.kills.append((T0 + 10.5, "tm-1"))
        fake.hangs.update({2, 3, 4})  # no replacement ever registers

    run, result, fake = make_run(tmp_path, "backend.flink.max_recoveries=2", policy=Scripted(1), setup=setup)
    assert result.incomplete and "backend.flink.max_recoveries = 2" in result.incomplete, result.incomplete
    assert len(result.details["recoveries"]) == 2 and fake.closed


def test_a_jobmanager_that_exits_ends_the_run_incomplete(tmp_path):
    def setup(fake: FakeFlink) -> None:
        fake.jobmanager_exit_at = T0 + 15.5

    run, result, fake = make_run(tmp_path, setup=setup)
    assert result.incomplete and result.incomplete.startswith("the JobManager exited"), result.incomplete
    assert len(result.tables["instances"]["t_s"]) <= 15


# as a real Flink 2.3 gave it for the application of a job whose main method threw (shortened)
MAIN_TRACE = ("org.apache.flink.client.deployment.application.ApplicationExecutionException: Could not execute "
              "application.\n\tat org.apache.flink.client.deployment.application.PackagedProgramApplication."
              "runApplicationEntryPoint(PackagedProgramApplication.java:732)\nCaused by: org.apache.flink.client."
              "program.ProgramInvocationException: The main method caused an error: For input string: \"3000000000\"\n"
              "\tat org.apache.flink.client.program.PackagedProgram.callMainMethod(PackagedProgram.java:373)\n"
              "Caused by: java.lang.NumberFormatException: For input string: \"3000000000\"\n\tat java.base/java.lang."
              "NumberFormatException.forInputString(NumberFormatException.java:67)")


def test_an_application_whose_main_method_fails_ends_the_run_at_once_and_incomplete(tmp_path):
    run, result, fake = make_run(tmp_path, setup=lambda f: setattr(f, "main_error", (1003.0, MAIN_TRACE)))
    assert result.incomplete == ("the Flink job did not start: the application is FAILED: "
                                 'java.lang.NumberFormatException: For input string: "3000000000" (before the job '
                                 "runs at parallelism 2)"), result.incomplete
    assert fake.clock.t - 1000.0 < 5.0  # at the first reading that says so, not after the start timeout
    assert fake.closed and result.tables == {} and "flink" in result.details


def test_a_job_that_fails_every_attempt_before_it_runs_ends_the_run_incomplete(tmp_path):
    trace = "java.lang.UncheckedIOException: emission-ledger.bin: Is a directory\n\tat testbed.EmissionLedger"
    run, result, fake = make_run(tmp_path, setup=lambda f: setattr(f, "task_error", trace))
    assert result.incomplete == ("the Flink job did not start: the job failed 3 times before it ever ran: "
                                 "java.lang.UncheckedIOException: emission-ledger.bin: Is a directory (before the "
                                 "job runs at parallelism 2)"), result.incomplete
    assert len(fake.failures) == START_FAILURES and fake.clock.t - 1000.0 < 20.0 and fake.closed


def test_a_start_that_never_comes_is_incomplete_after_the_start_timeout(tmp_path):
    run, result, fake = make_run(tmp_path, "+backend.flink.settings.start_timeout_s=30",
                                 setup=lambda f: f.hangs.update({1, 2}))
    assert result.incomplete is not None and result.incomplete.startswith(
        "the Flink job did not start: timed out after 30 s before the job runs at parallelism 2"), result.incomplete
    assert 30.0 <= fake.clock.t - 1000.0 < 31.0 and fake.closed


# -- the pure parts ----------------------------------------------------------------------------------
def test_what_the_rest_api_says_of_a_start_that_fails():
    ok = {"exceptionHistory": {"entries": [], "truncated": False}}
    one = {"exceptionHistory": {"entries": [{"exceptionName": "x", "stacktrace": "java.lang.Error: e\n\tat a"}]}}
    answers = {"/applications/overview": {"applications": [{"id": "a1", "status": "RUNNING"}]},
               "/jobs/j/exceptions": one}
    assert why_not_started(answers.__getitem__, "j", "CREATED", ran=False) is None  # one failure: a fault, retried
    assert why_not_started(answers.__getitem__, "j", "FAILED", ran=True) == "the job is FAILED: java.lang.Error: e"
    assert start_failure("RESTARTING", ["e: 3", "e: 2", "e: 1"], ran=False) == \
        "the job failed 3 times before it ever ran: e: 3"
    assert start_failure("RESTARTING", ["e"] * 5, ran=True) is None  # once it has run, faults are the loop's
    failed = {"/applications/overview": {"applications": [{"id": "a1", "status": "FAILED"}]},
              "/applications/a1/exceptions": ok}
    assert why_not_started(failed.__getitem__, "j", "NONE", ran=False) == \
        "the application is FAILED: no exception recorded"
    del answers["/applications/overview"]  # an API without applications: the job's own state still counts

    def rest(path: str):
        if path not in answers:
            raise OSError(f"HTTP 404: {path}")
        return answers[path]

    assert why_not_started(rest, "j", "FAILED", ran=False) == "the job is FAILED: java.lang.Error: e"
    assert why_not_started(rest, "j", "NONE", ran=False) is None  # no job yet: not asked after
    assert root_cause("\n  a: b  \n\tat c") == "a: b" and root_cause("") == "no message"
    assert root_cause(MAIN_TRACE) == "java.lang.NumberFormatException: For input string: \"3000000000\""



def test_losses_are_exited_processes_and_taskmanagers_flink_dropped():
    losses = find_losses(["tm-1", "tm-2", "tm-3"], {"tm-1": -9}, registered={"tm-3"},
                         seen_registered={"tm-1", "tm-2", "tm-3"})
    assert losses == [Loss("tm-1", "its process exited (killed by SIGKILL)", kill=False),
                      Loss("tm-2", losses[1].why, kill=True)]
    # not yet registered is not lost; an unreadable REST API says nothing
    assert find_losses(["tm-4"], {}, registered=set(), seen_registered=set()) == []
    assert find_losses(["tm-2"], {}, registered=None, seen_registered={"tm-2"}) == []
    assert exit_status(1) == "exit status 1"


def test_a_taskmanager_stuck_before_its_registration_is_lost_after_the_bound():
    started = {"tm-1": 0.0, "tm-2": 50.0}
    assert [x.taskmanager for x in unregistered(["tm-1", "tm-2"], set(), started, 70.0, 30.0)] == ["tm-1"]
    assert unregistered(["tm-1"], None, started, 70.0, 30.0) == []


def test_the_bound_of_a_change_follows_the_measured_start():
    s = FlinkSettings(stabilization_s=1, cooldown_s=1, checkpoint_s=2, restart_delay_s=1, heartbeat_timeout_s=5)
    assert change_bound_s(20.0, s) == 3 * 20.0 + 10.0
    assert change_bound_s(40.0, s) > change_bound_s(20.0, s)


def test_the_verdict_names_every_reason_and_none_for_a_complete_run():
    assert verdict() is None
    assert verdict(imbalances={"counted - scheduled": 0.0}) is None
    assert verdict("the drain did not finish", {"counted - scheduled": 3}) == \
        "the drain did not finish; accounting does not balance: counted - scheduled = +3"
    assert verdict(fault="the JobManager exited") == "the JobManager exited"


def test_an_interrupt_is_recorded_as_such():
    assert failure_reason(KeyboardInterrupt()) == "interrupted (SIGINT)"
    assert failure_reason(KeyboardInterrupt("SIGTERM")) == "interrupted (SIGTERM)"
    assert failure_reason(ValueError("bad")) == "ValueError: bad"


def test_execute_marks_a_run_incomplete_with_its_reason_and_the_command_finds_it(tmp_path, monkeypatch):
    cfg = compose_config("evaluation=daedalus", "evaluation.only=[daedalus]", "reps=1", f"out={tmp_path}")
    spec = plan_runs(cfg)[0]
    why = "the drain did not finish within its bound: 3 of 5 sentences not counted"
    monkeypatch.setattr(JobSimulation, "run", lambda self: RunResult({}, 1.0, {"accounting": {}}, incomplete=why))
    run_dir = execute(cfg, spec)
    m = read_manifest(run_dir)
    assert (m.status, m.error) == ("incomplete", why) and m.details["accounting"] == {}
    assert incomplete_runs([run_dir]) == [(run_dir, why)]
