"""Faults on the live testbed: a killed operator container, a RabbitMQ restart, an unreachable
Docker engine, and an interrupted run.

* One live run (threshold policy, a constant load) during which an O3 container is killed with
  SIGKILL and, later, RabbitMQ is stopped and started again: the watchdog replaces the container
  (an action with its reason), the provider and the operators reconnect, and nothing is lost.
  Counts can only err upwards (a redelivered duplicate still sitting in a queue at the end), never
  downwards, so per operator inflow <= processed + queued + dead-lettered.
* An engine that does not answer fails the run before anything is leased or declared, naming it.
* Ctrl-C (SIGINT) during a run removes every container of the run and marks the run incomplete.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import List, Optional

import docker
import pandas as pd
import pytest

from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from testbed.live.engines import EngineError

from .conftest import ROOT, name_of, wait_for_rabbit
from .runner_helpers import interrupt_experiment
from .service_faults import BrokerOutage
from .test_live_run import config

# TESTBED_CPU_HOG=1: one core busy
pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

SHORT = ["pattern=constant", "pattern.levels=[1]", "duration_min=2.5", "load_scale=0.5", "reps=1",
         "summary=false", "runtime.reasoning_s=10", "runtime.monitoring_s=3", "backend=docker",
         "backend.live.stop_timeout_s=20", "policy=threshold",
         # the scenario was sized for the paper's values (the btu evaluation defaults to the calibrated ones)
         "profile=paper"]


def run_containers(name_prefix: str, operator: Optional[str] = None) -> List:
    client = docker.from_env()
    try:
        labels = ["testbed.run"] + ([f"testbed.operator={operator}"] if operator else [])
        # sparse: no inspect per listed container, which fails (404) for one removed in between
        listed = client.containers.list(sparse=True, filters={"label": labels})
        return [c for c in listed if name_of(c).startswith(name_prefix)]
    finally:
        client.close()


class Faults(threading.Thread):
    """Kills an O3 container once the run has been going for a while, then restarts RabbitMQ."""

    def __init__(self, name_prefix: str, outage: BrokerOutage):
        super().__init__(daemon=True)
        self.name_prefix, self.outage = name_prefix, outage
        self.killed: Optional[str] = None
        self.restarted = False
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 300
            while not run_containers(self.name_prefix, "O3"):
                if time.monotonic() > deadline:
                    raise TimeoutError("no O3 container of the run appeared")
                time.sleep(0.5)
            time.sleep(35)  # mid-stream: the run has been processing for a while
            [victim] = run_containers(self.name_prefix, "O3")
            victim.kill()  # SIGKILL
            self.killed = name_of(victim)
            time.sleep(30)
            with self.outage:  # armed before the run: the broker goes away at once
                time.sleep(3)
            self.restarted = True
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images) -> Path:
    out = tmp_path_factory.mktemp("faults")
    faults = Faults("constant-threshold-live-1-", BrokerOutage(rabbitmq_url).arm())  # the CLI boots meanwhile
    faults.start()
    try:
        [run_dir] = run_experiment(config(*SHORT, f"out={out}"))
    finally:
        faults.join(timeout=240)
        faults.outage.end()  # never leave the shared broker stopped
        wait_for_rabbit(rabbitmq_url)
    assert faults.error is None, faults.error
    assert faults.killed and faults.restarted
    return run_dir


def test_a_killed_container_is_replaced_by_the_watchdog(faulty_run):
    manifest = read_manifest(faulty_run)
    assert manifest.status == "complete", manifest.error
    actions = pd.read_parquet(faulty_run / "actions.parquet")
    replaced = actions[actions.action == "replace"]
    assert list(replaced.operator) == ["O3"], actions.to_string()
    assert "watchdog" in replaced.reason.iloc[0]
    crashes = manifest.details["crashes"]
    assert len(crashes) == 1 and crashes[0]["instance"]["operator"] == "O3"
    assert crashes[0]["exit_code"] == 137  # SIGKILL
    instances = pd.read_parquet(faulty_run / "instances.parquet")
    o3 = instances[(instances.operator == "O3") & (instances.t_s > replaced.t_s.iloc[0] + 15)]
    assert (o3.instances >= 1).all()  # O3 serves again after the replacement


def test_after_a_kill_and_a_broker_restart_nothing_is_lost(faulty_run):
    details = read_manifest(faulty_run).details
    accounting = details["accounting"]
    assert details["provider_flushed"]
    assert details["provider_stats"]["reconnects"] >= 1  # the provider did see the broker go away
    assert all(m <= 0 for m in accounting["missing"].values()), json.dumps(accounting, indent=1)
    assert accounting["processed"]["O3"] > 0 and accounting["processed"]["O8"] > 0
    assert not run_containers(details["prefix"])


def test_an_unreachable_engine_fails_before_anything_is_leased(tmp_path, rabbitmq_url):
    cfg = config(*SHORT, f"out={tmp_path}", "backend.live.engines=[{url: 'tcp://127.0.0.1:1', max_hosts: 2}]")
    with pytest.raises(EngineError, match=r"tcp://127\.0\.0\.1:1"):
        run_experiment(cfg)
    [run_dir] = [p for p in tmp_path.rglob("manifest.json")]
    manifest = read_manifest(run_dir.parent)
    assert manifest.status == "incomplete" and "tcp://127.0.0.1:1" in manifest.error
    assert not (run_dir.parent / "actions.parquet").exists()  # nothing leased, nothing recorded


def test_ctrl_c_removes_the_run_containers_and_marks_the_run_incomplete(tmp_path, rabbitmq_url, redis_url,
                                                                         docker_url, operator_images):
    args = [a for a in SHORT if not a.startswith("duration_min")] + ["duration_min=5", f"out={tmp_path}"]
    returncode, output = interrupt_experiment(
        args, ROOT, lambda: len(run_containers("constant-threshold-live-1-")) >= 9, settle_s=5)
    assert returncode == 130, output
    assert run_containers("constant-threshold-live-1-") == []
    manifest = read_manifest(tmp_path / "constant" / "threshold-live" / "1")
    assert manifest.status == "incomplete"
