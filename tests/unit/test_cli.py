"""The `testbed` command end to end, as a user runs it (short simulated runs)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from tests import guarded

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return guarded.run(
        [sys.executable, "-m", "testbed.cli", *args], cwd=cwd, cpu_s=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_experiment_runs_the_matrix_and_prints_the_summary(tmp_path):
    out = tmp_path / "runs"
    proc = run_cli("experiment", "pattern=two_level", "policies.btu.scaling_threshold=100", "reps=1",
                   "duration_min=10", f"out={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for config in ("threshold", "btu-10", "btu-30", "btu-60"):
        assert (out / "two_level" / config / "1" / "manifest.json").is_file()
    for label in ("threshold@10", "threshold@30", "threshold@60", "btu-10", "btu-30", "btu-60"):
        assert label in proc.stdout
    summary = pd.read_csv(out / "two_level" / "summary.csv")
    assert {"pattern", "approach", "btu_minutes", "metric", "mean", "sd"} <= set(summary.columns)
    threshold_costs = summary[(summary.approach == "threshold") & (summary.metric == "resource_cost")]
    assert sorted(threshold_costs.btu_minutes) == [10, 30, 60]  # one run re-billed under each BTU


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_multirun_sweeps_one_policy(tmp_path):
    out = tmp_path / "runs"
    proc = run_cli("experiment", "-m", "policy=btu", "billing.btu_minutes=10,30", "reps=1",
                   "duration_min=5", f"out={out}", "summary=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (out / "stepwise").iterdir()) == ["btu-10", "btu-30"]


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_terminated_experiment_marks_running_runs_incomplete(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "workers=2"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 120
    while not list(out.glob("stepwise/*/*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "incomplete" in stderr
    statuses = [read_manifest(m.parent).status for m in out.glob("stepwise/*/*/manifest.json")]
    assert "incomplete" in statuses and "running" not in statuses
    assert len(statuses) < 12  # queued runs never started


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_patterns_plot_writes_a_png(tmp_path):
    proc = run_cli("patterns", "plot", str(tmp_path / "patterns.png"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "patterns.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_command_shows_usage(tmp_path):
    proc = run_cli("frobnicate", cwd=tmp_path)
    assert proc.returncode == 2 and "testbed experiment" in proc.stderr


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_evaluations_tells_an_evaluations_backend_for_make_experiment(capsys):
    from testbed.evaluations import main as evaluations_main

    assert evaluations_main(["daedalus_live", "backend"]) == 0
    assert evaluations_main(["btu", "backend"]) == 0
    assert evaluations_main(["btu", "workload"]) == 0
    assert capsys.readouterr().out.split() == ["docker", "sim", "stepwise"]
    assert evaluations_main(["btu", "hosts"]) == 2
