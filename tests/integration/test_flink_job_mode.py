"""Daedalus, the HPA, DS2 and the Flink autoscaler's algorithm driving a real Apache Flink in reactive
mode (`backend=flink`, testbed/live/flink_job.py, docs/flink.md#job-mode-runs): evaluation
daedalus_flink, compressed to a minute per run (the first 72 min of wc_sine at a time compression of
72), starting from one TaskManager while the workload's peak needs two. Daedalus, DS2 and the Flink
autoscaler must rescale by adding or removing TaskManagers (a static deployment is checked in
test_flink_faults.py); every sentence the schedule made due must be counted exactly once once the run
has drained; no Flink process may outlive a run, nor a run interrupted with SIGINT (which is marked
incomplete). Flink is installed and the job built by the project's script (the fixture of
test_flink_engine.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment

from .test_flink_engine import flink_alive, flink_installed, wait_gone  # noqa: F401 (a fixture)
from .test_live_run import config

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration, pytest.mark.live, pytest.mark.slow, pytest.mark.usefixtures("cpu_hog"),
]

RUN = ["evaluation=daedalus_flink", "duration_min=72", "job.initial_parallelism=1", "reps=1", "summary=false"]
# the static deployment runs in test_flink_faults.py (a static run with a TaskManager lost still never
# rescales): one Flink run less in the suite
CONFIGS = ("daedalus", "hpa-80", "ds2", "flink_autoscaler")


@pytest.fixture(scope="module")
def flink_runs(tmp_path_factory, flink_installed) -> Dict[str, Path]:  # noqa: F811 (the fixture)
    out = tmp_path_factory.mktemp("flink-job")
    runs = run_experiment(config(*RUN, f"evaluation.only=[{','.join(CONFIGS)}]", f"out={out}"))
    return {read_manifest(d).config.removesuffix("-flink"): d for d in runs}


def table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / f"{name}.parquet")


def test_every_run_completes_and_counts_every_sentence_once(flink_runs):
    assert sorted(flink_runs) == sorted(CONFIGS)
    for name, run in flink_runs.items():
        m = read_manifest(run)
        assert m.status == "complete", (name, m.error)
        acc = m.details["accounting"]
        print(name, acc)
        assert acc["drained"], (name, acc)
        assert acc["scheduled"] > 0 and acc["counted"] == acc["scheduled"] == acc["emitted"], (name, acc)
        assert acc["pending"] == 0, (name, acc)
        assert m.details["flink"]["settings"]["stop_mode"] == "graceful"  # recorded with the run


def test_daedalus_rescales_by_taskmanagers_and_the_downtime_is_measured(flink_runs):
    run = flink_runs["daedalus"]
    rescales = table(run, "rescales")
    print(rescales.to_string())
    assert len(rescales) >= 1
    done = rescales.dropna(subset=["downtime_s"])
    assert len(done) >= 1 and (done.downtime_s > 0).all()
    actions = table(run, "actions")
    assert set(actions.action) & {"scale_up", "scale_down"}, actions.to_string()
    instances = table(run, "instances")
    assert instances.hosts.nunique() >= 2  # the deployed TaskManagers changed


@pytest.mark.parametrize("name", ["ds2", "flink_autoscaler"])
def test_the_practitioners_autoscalers_rescale_with_their_own_reasons(flink_runs, name):
    """From one TaskManager under a load that needs two, DS2 and the Flink autoscaler at their
    defaults (times / 72) add TaskManagers; each rescale's downtime is measured and its reason is
    the policy's own."""
    run = flink_runs[name]
    rescales = table(run, "rescales")
    print(name, rescales.to_string())
    assert len(rescales) >= 1 and rescales.to_n.iloc[0] > rescales.from_n.iloc[0] == 1
    done = rescales.dropna(subset=["downtime_s"])
    assert len(done) >= 1 and (done.downtime_s > 0).all()
    actions = table(run, "actions")
    scaling = actions[actions.action.isin(["scale_up", "scale_down"])]
    prefix = {"ds2": "ds2:", "flink_autoscaler": "flink-autoscaler:"}[name]
    assert len(scaling) >= 1 and scaling.reason.str.startswith(prefix).all(), scaling.to_string()
    assert table(run, "instances").hosts.nunique() >= 2


def test_no_flink_process_outlives_a_run(flink_runs):
    for run in flink_runs.values():
        pids = [p["pid"] for p in read_manifest(run).details["flink"]["processes"].values()]
        assert pids and wait_gone(pids, 30.0) == [], pids


def run_pids(work_dir: Path) -> List[int]:
    """Java processes whose command line names the run's Flink work directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(work_dir).encode() in cmd and b"java" in cmd:
                found.append(int(entry.name))
    return flink_alive(found)


def test_sigint_stops_every_flink_process_and_marks_the_run_incomplete(tmp_path, flink_installed):  # noqa: F811
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "experiment", *RUN, "evaluation.only=[static-2]",
                             f"out={tmp_path}"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = tmp_path / "wc_sine" / "static-2-flink" / "1"
    work_dir = run / "flink"
    deadline = time.monotonic() + flink_installed.start_timeout_s
    try:
        # the JobManager and both TaskManagers running: the run is under way
        while len(run_pids(work_dir)) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        pids = run_pids(work_dir)
        assert len(pids) >= 3, f"the run did not start its cluster: {pids}"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=flink_installed.stop_timeout_s + 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, out.decode(errors="replace")[-2000:]
    assert wait_gone(pids, 30.0) == [], pids
    assert run_pids(work_dir) == []
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "incomplete", manifest.get("error")
    assert manifest["error"] == "interrupted (SIGINT)"
