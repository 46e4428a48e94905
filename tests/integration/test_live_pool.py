"""Pool activation and the stop-the-world restart on the live testbed: real operator containers,
RabbitMQ, Redis and the data provider, driven by a scripted policy registered by this test alone.

O3 (3 s of work per item, so that one replica builds a queue) gets a pool of three replicas of which
one is switched on; later all three; then a restart with purge. Switched-off replicas process nothing, the purge
is counted as dropped, and every emitted item is still accounted for (processed, queued, dead-lettered or purged)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List

import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from testbed.model import Action, Restart, ScaleUp, SetActive, Snapshot
from testbed.policies import registry
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy
from tests.integration.test_live_run import config

# TESTBED_CPU_HOG=1: one core busy
pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

# 30 s with one replica (a backlog builds), 20 s with three, then a 10 s restart and 20 s after it
# for the accounting: 1.5 min in all, as long as the checks need
OFF_AT, ON_AT, RESTART_AT, DOWNTIME_S = 10.0, 40.0, 60.0, 10.0


@dataclass
class ScriptParams:
    pass


class PoolScript(Policy):
    """A pool of 3 O3 replicas, 1 active, then 3, then a restart that purges the queues."""

    def __init__(self, params: ScriptParams, placement):
        self.placement = placement

    def decide(self, s: Snapshot) -> List[Action]:
        if abs(s.t - OFF_AT) < 5:
            host = next(i.host for i in s.instances if i.operator == "O3")
            return [ScaleUp("O3", host, "pool"), ScaleUp("O3", host, "pool"), SetActive("O3", 1, "one of three")]
        if abs(s.t - ON_AT) < 5:
            return [SetActive("O3", 3, "all three")]
        if abs(s.t - RESTART_AT) < 5:
            return [Restart(DOWNTIME_S, True, "scripted restart")]
        return []


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Path:
    saved = dict(registry.policies())
    register_policy("live_pool_script", ScriptParams)(PoolScript)
    try:
        out = tmp_path_factory.mktemp("live-pool")
        [run] = run_experiment(config(
            "pattern=constant", "pattern.levels=[1]", "duration_min=1.5", "load_scale=0.5", "reps=1",
            "summary=false", "runtime.reasoning_s=10", "runtime.monitoring_s=3", "runtime.initial_instances=1",
            "backend=docker", "+backend.live.work_ms={O3: 3000}",  # one O3 replica cannot keep up: a queue
            # the sinks see few items in 1.5 min: sample each one, or a probabilistic rule may sample none
            "runtime.sample_every=1",
            "backend.live.stop_timeout_s=20", f"out={out}", "evaluation.configurations.0.name=pool",
            "evaluation.configurations.0.policy=live_pool_script", "evaluation.only=[pool]"))
        return run
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


def table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / f"{name}.parquet")


def test_switched_off_replicas_process_nothing(run_dir):
    manifest = read_manifest(run_dir)
    assert manifest.status == "complete", manifest.error
    actions = table(run_dir, "actions")
    off = actions[actions.action == "deactivate"]
    on = actions[actions.action == "activate"]
    assert len(off) == 2 and len(on) == 2 and set(off.instance) == set(on.instance), actions.to_string()
    stats = table(run_dir, "instance_stats")
    # from a few seconds after the switch-off to the switch-on, the two replicas took nothing
    window = stats[(stats.t_s > off.t_s.iloc[0] + 6) & (stats.t_s <= on.t_s.iloc[0])]
    assert window[window.instance.isin(set(off.instance))]["processed"].sum() == 0, window.to_string()
    o3 = window[window.operator == "O3"]
    assert o3["processed"].sum() > 0  # the active one did the work
    after = stats[(stats.t_s > on.t_s.iloc[0] + 6) & (stats.t_s < RESTART_AT) & stats.instance.isin(set(on.instance))]
    assert after["processed"].sum() > 0, stats.to_string()


def test_the_restart_purges_and_every_item_is_accounted_for(run_dir):
    manifest = read_manifest(run_dir)
    accounting = manifest.details["accounting"]
    assert accounting["missing"] == {}, json.dumps(accounting, indent=1)
    restart = table(run_dir, "actions").query("action == 'restart'")
    assert len(restart) == 1 and "downtime 10 s" in restart.reason.iloc[0]
    dropped = table(run_dir, "dropped")
    purged = dropped[dropped.reason == "purge"]
    assert int(purged["items"].sum()) == sum(accounting["purged"].values()) > 0
    latency = table(run_dir, "latency")  # end to end, at the sinks O8 and O9
    assert len(latency) > 0 and set(latency.operator) <= {"O8", "O9"} and (latency.latency_ms > 0).all()
    edges = table(run_dir, "edges")
    assert set(zip(edges.source, edges.target, strict=True)) >= {("S2_production", "O1"), ("O1", "O3")}
    assert edges["items"].sum() > 0
    processed = table(run_dir, "processed")
    down = processed[(processed.t_s > restart.t_s.iloc[0] + 4) & (processed.t_s <= restart.t_s.iloc[0] + DOWNTIME_S)]
    assert down["items"].sum() <= 5, down.to_string()  # paused: at most what was in process when it began
