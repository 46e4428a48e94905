"""A job-mode run on a real Apache Flink facing its engine's faults (testbed/live/flink_job.py,
docs/flink.md#faults): a TaskManager SIGKILLed while another runs, the only TaskManager SIGKILLed,
and a TaskManager frozen (SIGSTOP) past a 5 s heartbeat timeout. The signal goes to the JVM from a
timer, behind the controller's back, a few seconds into the run (40 s of run time each, static
deployments). Each run must find the loss, record it (a `replace` action, details.recoveries), replace
the TaskManager, and end with every sentence counted exactly once (re-emissions counted as replays),
or be incomplete with its reason; no Flink process may outlive it."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import execute, plan_runs
from testbed.live.flink_job import FlinkJobRun

from .test_flink_engine import flink_installed, wait_gone  # noqa: F401 (a fixture)
from .test_flink_job_mode import run_pids
from .test_live_run import config

pytestmark = [
    pytest.mark.integration, pytest.mark.live, pytest.mark.slow, pytest.mark.usefixtures("cpu_hog"),
]

RUN = ["evaluation=daedalus_flink", "duration_min=48", "reps=1", "summary=false",  # 40 s of run time
       "+backend.flink.settings.heartbeat_interval_s=1", "+backend.flink.settings.heartbeat_timeout_s=5"]
STATIC_1 = ["evaluation.configurations=[{name:static-1,policy:static_n,params:{workers:1}}]",
            "evaluation.only=[static-1]"]
STATIC_2 = ["evaluation.only=[static-2]"]
# run time of the signal: the job has run a few checkpoints (every 2 s), and a replacement (10-20 s
# to register on a loaded machine, a few more to restart the job) is back well before the end
FAULT_AT_S = 5.0


def run_with_fault(tmp_path: Path, monkeypatch, overrides: List[str], taskmanager: str,
                   sig: signal.Signals) -> Tuple[Path, Dict[str, Any]]:
    """One run (execute, as the experiment command runs it) whose `taskmanager` gets `sig` at FAULT_AT_S
    of run time; returns its folder and what the injection saw."""
    cfg = config(*RUN, *overrides, f"out={tmp_path}")
    [spec] = plan_runs(cfg)
    seen: Dict[str, Any] = {}
    loop = FlinkJobRun._loop

    def inject(run: FlinkJobRun) -> None:
        proc = run.engine.cluster.taskmanagers[taskmanager]  # type: ignore[union-attr]
        os.kill(proc.pid, sig)
        seen.update(pid=proc.pid, t_s=run.now())

    def loop_with_fault(run: FlinkJobRun, engine, first) -> None:
        timer = threading.Timer(FAULT_AT_S, inject, args=(run,))
        timer.start()
        try:
            loop(run, engine, first)
        finally:
            timer.cancel()

    monkeypatch.setattr(FlinkJobRun, "_loop", loop_with_fault)
    t0 = time.monotonic()
    run_dir = execute(cfg, spec)
    seen["wall_s"] = time.monotonic() - t0
    return run_dir, seen


def check(run_dir: Path, seen: Dict[str, Any], taskmanager: str, why: str, n: int) -> dict:
    """The checks every fault run shares; returns the recovery for the scenario's own checks."""
    m = read_manifest(run_dir)
    actions = pd.read_parquet(run_dir / "actions.parquet")
    inst = pd.read_parquet(run_dir / "instances.parquet")
    acc = m.details["accounting"]
    print(f"\n{run_dir.parent.name}: {seen}\nstatus {m.status} ({m.error})\naccounting {acc}\n"
          f"recoveries {m.details['recoveries']}\ngiven up {m.details['given_up']}\n"
          f"{actions[actions.action == 'replace'].to_string()}\n"
          f"{inst[['t_s', 'instances', 'starting']].T.to_string()}")
    pids = [p["pid"] for p in m.details["flink"]["processes"].values()]
    assert pids and wait_gone(pids, 30.0) == [], pids  # no JVM left, the killed and frozen ones neither
    assert run_pids(run_dir / "flink") == []
    assert m.status == "complete", m.error  # else: incomplete with its reason (printed above)
    assert acc["drained"] and acc["pending"] == 0, acc
    assert acc["counted"] == acc["scheduled"] == acc["emitted"] > 0, acc  # each sentence counted once
    assert acc["replays"] >= 0
    [rec] = m.details["recoveries"]
    assert rec["taskmanager"] == taskmanager and why in rec["why"], rec
    # found after the signal, then the job ran at n again (during the run, or its drain)
    assert rec["t_s"] >= seen["t_s"] - 0.05 and rec["downtime_s"] > 0, rec  # t_s is rounded to 0.1 s
    assert list(actions[actions.action == "replace"].instance) == [taskmanager]
    lost = inst[inst.t_s > actions[actions.action == "replace"].t_s.iloc[0]]
    assert (lost.instances < n).any()  # the rows show the job running without the lost TaskManager
    return rec


def test_a_killed_taskmanager_is_replaced_while_the_other_runs_on(tmp_path, monkeypatch, flink_installed):  # noqa: F811
    run_dir, seen = run_with_fault(tmp_path, monkeypatch, STATIC_2, "tm-1", signal.SIGKILL)
    rec = check(run_dir, seen, "tm-1", "killed by SIGKILL", 2)
    assert rec["t_s"] - seen["t_s"] <= 3.0  # found at the next reading or so (a reading takes up to 3 s)
    # the static deployment never rescales: a replaced TaskManager is no change of its parallelism
    assert len(pd.read_parquet(run_dir / "rescales.parquet")) == 0
    actions = pd.read_parquet(run_dir / "actions.parquet")
    assert not actions.action.isin(["scale_up", "scale_down"]).any(), actions.to_string()
    assert read_manifest(run_dir).details["flink"]["settings"]["stop_mode"] == "graceful"


def test_the_only_taskmanager_killed_is_replaced_and_nothing_is_lost(tmp_path, monkeypatch, flink_installed):  # noqa: F811
    run_dir, seen = run_with_fault(tmp_path, monkeypatch, STATIC_1, "tm-1", signal.SIGKILL)
    check(run_dir, seen, "tm-1", "killed by SIGKILL", 1)


def test_a_frozen_taskmanager_is_killed_and_replaced_after_the_heartbeat_timeout(tmp_path, monkeypatch,
                                                                                 flink_installed):  # noqa: F811
    run_dir, seen = run_with_fault(tmp_path, monkeypatch, STATIC_2, "tm-2", signal.SIGSTOP)
    rec = check(run_dir, seen, "tm-2", "heartbeat timeout", 2)
    assert rec["t_s"] - seen["t_s"] >= 5.0  # not before Flink's heartbeat timeout
