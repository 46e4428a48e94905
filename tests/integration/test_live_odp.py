"""ODP placement on the live testbed (docs/papers/odp.md#odp-as-a-placement-strategy): the static
policy leases 4 hosts of 3 OEE instances each (memory), ODP (w_r = 1 over the configured mean
delays) places the 9 operators in one solve, and the operator containers run where the solver said.
The live testbed does not emulate delays or availabilities (docs/papers/odp.md#what-is-not-built)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from testbed.experiment import run_experiment
from tests.integration.test_live_run import config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Path:
    out = tmp_path_factory.mktemp("live-odp")
    [run] = run_experiment(config(
        "profile=paper", "pattern=constant", "pattern.levels=[1]", "duration_min=1.5", "load_scale=0.5", "reps=1",
        "summary=false", "runtime.reasoning_s=10", "runtime.monitoring_s=3", "infrastructure.host_memory_mb=1600",
        "backend=docker", "backend.live.stop_timeout_s=20", f"out={out}",
        "evaluation.configurations.0.name=odp", "evaluation.configurations.0.policy=static",
        "evaluation.configurations.0.placement=odp", "+evaluation.configurations.0.params={hosts: 4}",
        "evaluation.only=[odp]"))
    return run


def test_containers_run_where_the_solver_placed_them(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    placements = pd.read_parquet(run_dir / "placements.parquet")
    assert len(placements) == 9 and set(placements.action) == {"scale_up"}
    # one solve, optimal, behind every decision
    assert set(placements.solve) == {1} and set(placements.solver_status) == {"optimal"}
    assert placements.reason.str.startswith("odp solve 1: optimal").all()
    assert (placements.solve_s > 0).all() and placements.objective.notna().all()
    # the containers ran on the hosts of the solution (the pool's records of its Docker containers)
    ran = {r["id"]: r["host"] for r in manifest["details"]["instances"] if r["running_at"] is not None}
    assert dict(zip(placements.instance, placements.host)) == ran
    # memory for 3 instances per host: the solution spreads over at least 3 of the 4 hosts
    assert len(set(ran.values())) >= 3
    processed = pd.read_parquet(run_dir / "processed.parquet")
    assert processed["items"].sum() > 0
