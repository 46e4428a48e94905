"""A job-mode run on a real Apache Flink facing its engine's faults (testbed/live/flink_job.py,
docs/flink.md#faults): a TaskManager SIGKILLed while another runs, then, once the job runs at two
again, that other one frozen (SIGSTOP) past a 5 s heartbeat timeout (one run of a static deployment
of two, 60 s of run time); and the only TaskManager SIGKILLed (a static deployment of one, 40 s).
The signals go to the JVMs from a thread, behind the controller's back. Each run must find every
loss, record it (a `replace` action, details.recoveries), replace the TaskManager, and end with
every sentence counted exactly once (re-emissions counted as replays), or be incomplete with its
reason; no Flink process may outlive it."""
from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

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

RUN = ["evaluation=daedalus_flink", "reps=1", "summary=false",
       "+backend.flink.settings.heartbeat_interval_s=1", "+backend.flink.settings.heartbeat_timeout_s=5"]
STATIC_1 = ["duration_min=48",  # 40 s of run time
            "evaluation.configurations=[{name:static-1,policy:static_n,params:{workers:1}}]",
            "evaluation.only=[static-1]"]
# 60 s of run time: a kill found and its replacement running (10-20 s to register on a loaded machine,
# a few more to restart the job), then a freeze found after the heartbeat timeout, with rows left
# that show the job without the frozen TaskManager
STATIC_2 = ["duration_min=72", "evaluation.only=[static-2]"]
# run time of the first signal: the job has run a few checkpoints (every 2 s)
FAULT_AT_S = 5.0


@dataclass(frozen=True)
class Fault:
    taskmanager: str
    sig: signal.Signals
    after: int = 0  # sent once this many replacements have run (their downtime measured), FAULT_AT_S at the earliest


def _inject(run: FlinkJobRun, faults: Sequence[Fault], seen: List[Dict[str, Any]], stop: threading.Event) -> None:
    for fault in faults:
        while not stop.is_set():
            settled = [r for r in run.ledger.recoveries if not math.isnan(r.downtime_s)]
            if run.now() >= FAULT_AT_S and len(settled) >= fault.after:
                break
            stop.wait(0.1)
        if stop.is_set():
            return
        proc = run.engine.cluster.taskmanagers[fault.taskmanager]  # type: ignore[union-attr]
        os.kill(proc.pid, fault.sig)
        seen.append({"taskmanager": fault.taskmanager, "pid": proc.pid, "t_s": run.now()})


def run_with_faults(tmp_path: Path, monkeypatch, overrides: List[str],
                    faults: Sequence[Fault]) -> Tuple[Path, List[Dict[str, Any]]]:
    """One run (execute, as the experiment command runs it) whose TaskManagers get the faults' signals
    in turn; returns its folder and what each injection saw."""
    cfg = config(*RUN, *overrides, f"out={tmp_path}")
    [spec] = plan_runs(cfg)
    seen: List[Dict[str, Any]] = []
    loop = FlinkJobRun._loop

    def loop_with_faults(run: FlinkJobRun, engine, first) -> None:
        stop = threading.Event()
        injector = threading.Thread(target=_inject, args=(run, faults, seen, stop), daemon=True)
        injector.start()
        try:
            loop(run, engine, first)
        finally:
            stop.set()
            injector.join()

    monkeypatch.setattr(FlinkJobRun, "_loop", loop_with_faults)
    t0 = time.monotonic()
    run_dir = execute(cfg, spec)
    print(f"\n{run_dir.parent.name}: {time.monotonic() - t0:.0f} s, load average {os.getloadavg()}")
    return run_dir, seen


def check(run_dir: Path, seen: List[Dict[str, Any]], lost: List[Tuple[str, str]], n: int) -> List[dict]:
    """The checks every fault run shares (`lost`: each TaskManager signalled and why it is found lost,
    in order); returns the recoveries for the scenario's own checks."""
    m = read_manifest(run_dir)
    actions = pd.read_parquet(run_dir / "actions.parquet")
    inst = pd.read_parquet(run_dir / "instances.parquet")
    acc = m.details["accounting"]
    replaces = actions[actions.action == "replace"]
    print(f"{seen}\nstatus {m.status} ({m.error})\naccounting {acc}\n"
          f"recoveries {m.details['recoveries']}\ngiven up {m.details['given_up']}\n"
          f"{replaces.to_string()}\n{inst[['t_s', 'instances', 'starting']].T.to_string()}")
    pids = [p["pid"] for p in m.details["flink"]["processes"].values()]
    assert pids and wait_gone(pids, 30.0) == [], pids  # no JVM left, the killed and frozen ones neither
    assert run_pids(run_dir / "flink") == []
    assert m.status == "complete", m.error  # else: incomplete with its reason (printed above)
    assert acc["drained"] and acc["pending"] == 0, acc
    assert acc["counted"] == acc["scheduled"] == acc["emitted"] > 0, acc  # each sentence counted once
    assert acc["replays"] >= 0
    recs, names = m.details["recoveries"], [tm for tm, _ in lost]
    assert [r["taskmanager"] for r in recs] == [s["taskmanager"] for s in seen] == names, (recs, seen)
    assert list(replaces.instance) == names
    for rec, (_, why), injected, (_, row) in zip(recs, lost, seen, replaces.iterrows(), strict=True):
        assert why in rec["why"], rec
        # found after the signal, then the job ran at n again (during the run, or its drain)
        assert rec["t_s"] >= injected["t_s"] - 0.05 and rec["downtime_s"] > 0, rec  # t_s is rounded to 0.1 s
        assert (inst[inst.t_s > row.t_s].instances < n).any()  # rows show the job without the lost TaskManager
    return recs


def test_a_killed_then_a_frozen_taskmanager_are_each_replaced_while_the_other_runs_on(tmp_path, monkeypatch,
                                                                                      flink_installed):  # noqa: F811
    """tm-1 SIGKILLed (its replacement tm-3 starts); once the job runs at two again, tm-2 frozen."""
    faults = [Fault("tm-1", signal.SIGKILL), Fault("tm-2", signal.SIGSTOP, after=1)]
    run_dir, seen = run_with_faults(tmp_path, monkeypatch, STATIC_2, faults)
    killed, frozen = check(run_dir, seen, [("tm-1", "killed by SIGKILL"), ("tm-2", "heartbeat timeout")], 2)
    assert killed["t_s"] - seen[0]["t_s"] <= 3.0  # found at the next reading or so (a reading takes up to 3 s)
    assert frozen["t_s"] - seen[1]["t_s"] >= 5.0  # not before Flink's heartbeat timeout
    # the static deployment never rescales: a replaced TaskManager is no change of its parallelism
    assert len(pd.read_parquet(run_dir / "rescales.parquet")) == 0
    actions = pd.read_parquet(run_dir / "actions.parquet")
    assert not actions.action.isin(["scale_up", "scale_down"]).any(), actions.to_string()
    assert read_manifest(run_dir).details["flink"]["settings"]["stop_mode"] == "graceful"


def test_the_only_taskmanager_killed_is_replaced_and_nothing_is_lost(tmp_path, monkeypatch, flink_installed):  # noqa: F811
    run_dir, seen = run_with_faults(tmp_path, monkeypatch, STATIC_1, [Fault("tm-1", signal.SIGKILL)])
    check(run_dir, seen, [("tm-1", "killed by SIGKILL")], 1)
