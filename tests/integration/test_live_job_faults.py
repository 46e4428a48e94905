"""Faults during a live job-mode run (testbed/live/job.py; docs/papers/daedalus.md#faults-during-a-live-job-run):
one short static-12 run (6 workers, no rescale, the scenario of tests/integration/test_live_job.py)
per fault, the fault injected from a thread while the run goes on.

* **A worker killed with SIGKILL** (about 20 s in), **and a second one killed as the restart that
  recovers the first stops the world**: the run replaces the first and restarts the job from its
  checkpoints at the same parallelism; the second is replaced within that restart (or, if it had
  stopped already, by the job loop once the job runs again): a `replace` action naming each worker
  and its exit code 137; the run completes and the accounting identities of test_live_job.check_run
  hold (what the killed workers processed since their checkpoints is counted as replayed, not
  twice). A recovery's restart is a controller's rescale without the rebinding (the same restart
  of testbed/live/docker_job_engine.py); the rescale cases are tests/unit/test_docker_job_engine.py.
* **A RabbitMQ restart** (its application stopped for 3 s): the job's queues are transient, so the
  items in them are gone with the broker's restart; the run ends at once, incomplete, with one line
  naming RabbitMQ and the time.
* **A Redis restart** (as infra/services.sh runs it: `--save '' --appendonly no`, nothing on disk):
  the keyed state, the counts and the checkpoints are gone; the run ends incomplete with "Redis
  lost the run's state at t=...", never with wrong totals.

In every case no container of the run is left, and its queues, exchange and Redis keys are gone.
The broker and Redis are always restored in a `finally`."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import docker
import pytest
import redis

from operators.keyed_job import redis_key
from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from testbed.live.job import LiveJobError
from testbed.live.rabbit_management import ManagementClient
from testbed.live_config import LiveConfig

from .conftest import name_of, wait_for_rabbit
from .service_faults import BrokerOutage, restart_redis, restore_redis
from .test_live_job import SCENARIO, check_run, table
from .test_live_run import config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

STATIC = [a for a in SCENARIO if not a.startswith("evaluation.only")] + ["evaluation.only=[static-12]"]
NAME = "wc_sine-static-12-live-1-"  # the run's container names start with this
FAULT_AT_S = 20.0  # seconds after the run's six workers are up


def workers_of(name_prefix: str, running_only: bool = True) -> List:
    client = docker.from_env()
    try:
        listed = client.containers.list(all=not running_only, sparse=True, filters={"label": "testbed.run"})
        return [c for c in listed if name_of(c).startswith(name_prefix)]
    finally:
        client.close()


class Fault(threading.Thread):
    """Waits until the run's 6 workers run, then `FAULT_AT_S`, then injects the fault; `restore`
    runs in any case (also when the wait failed) so that the shared services come back."""

    def __init__(self, inject: Callable[[], object], restore: Callable[[], None] = lambda: None):
        super().__init__(daemon=True)
        self.inject, self.restore = inject, restore
        self.result: object = None
        self.injected_at: Optional[float] = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 240
            while len(workers_of(NAME)) < 6:
                if time.monotonic() > deadline:
                    raise TimeoutError("the run's six workers did not start")
                time.sleep(0.5)
            time.sleep(FAULT_AT_S)
            self.injected_at = time.monotonic()
            self.result = self.inject()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            try:
                self.restore()
            except BaseException as exc:
                self.error = self.error or exc


def run_with(fault: Fault, out: Path):
    """(run folder, the exception the run raised or None)."""
    fault.start()
    raised = None
    try:
        run_experiment(config(*STATIC, f"out={out}"))
    except LiveJobError as exc:
        raised = exc
    finally:
        fault.join(timeout=300)
    assert fault.error is None, repr(fault.error)
    return out / "wc_sine" / "static-12-live" / "1", raised


def assert_cleaned_up(rabbitmq_url: str, redis_url: str) -> None:
    """No container, queue, exchange or Redis key of the run is left (names start with NAME)."""
    assert workers_of(NAME, running_only=False) == []
    client = redis.Redis.from_url(redis_url)
    try:
        left = [k.decode() for k in client.scan_iter(f"{NAME}*", count=1000)]
    finally:
        client.close()
    assert left == [], left
    wait_for_rabbit(rabbitmq_url)
    broker = ManagementClient(LiveConfig().management_url, rabbitmq_url)
    for kind in ("queues", "exchanges"):
        assert broker.names(kind, NAME) == [], kind


def test_killed_workers_are_replaced_also_during_a_restart_and_the_job_restarts_from_its_checkpoints(
        tmp_path, rabbitmq_url, redis_url, docker_url, operator_images):
    def kill():
        workers = sorted(workers_of(NAME), key=name_of)
        first, second = workers[2], workers[4]
        control = redis_key(first.attrs["Labels"]["testbed.run"], "control")
        client = redis.Redis.from_url(redis_url)
        try:
            first.kill()  # SIGKILL
            deadline = time.monotonic() + 120  # the job loop looks every second; a loaded machine is slower
            while not (client.get(control) or b"").startswith(b"stop:"):
                if time.monotonic() > deadline:
                    raise TimeoutError("the recovery's stop-the-world did not begin")
                time.sleep(0.01)
        finally:
            client.close()
        second.kill()  # as the restart stops the world
        return [name_of(first), name_of(second)]

    fault = Fault(kill)
    run, raised = run_with(fault, tmp_path)
    assert raised is None, raised
    details = check_run(run, redis_url)  # complete; emitted = committed + queued + dead; state = committed
    recoveries = details["recoveries"]
    print(f"recoveries: {recoveries}")
    assert sorted(r["container"] for r in recoveries) == sorted(fault.result), recoveries
    assert all(r["exit_code"] == 137 for r in recoveries), recoveries
    actions = table(run, "actions")
    replaced = actions[actions.action == "replace"]
    assert sorted(replaced.instance) == sorted(r["worker"] for r in recoveries), actions.to_string()
    assert all("137" in reason for reason in replaced.reason)
    assert len(table(run, "rescales")) == 0  # a recovery is not the controller's rescale
    assert details["accounting"]["replayed"] >= max(r["replayed"] for r in recoveries) >= 0
    assert_cleaned_up(rabbitmq_url, redis_url)


def test_a_rabbitmq_restart_ends_the_run_incomplete_with_its_reason(tmp_path, rabbitmq_url, redis_url, docker_url,
                                                                   operator_images):
    outage = BrokerOutage(rabbitmq_url).arm()  # its CLI boots while the run deploys
    stopped: List[float] = []  # when the broker went away

    def restart():
        with outage:
            stopped.append(time.monotonic())
            time.sleep(3.0)

    fault = Fault(restart, outage.end)  # never leave the shared broker stopped
    run, raised = run_with(fault, tmp_path)
    m = read_manifest(run)
    assert m.status == "incomplete" and raised is not None
    reason = m.error
    assert "\n" not in reason and "Traceback" not in reason, reason
    assert "RabbitMQ" in reason and "t=" in reason, reason
    assert time.monotonic() - stopped[0] < 90  # it ends soon after the broker went away, not at its duration's end
    assert_cleaned_up(rabbitmq_url, redis_url)


def test_a_redis_restart_ends_the_run_incomplete_naming_the_lost_state(tmp_path, rabbitmq_url, redis_url, docker_url,
                                                                      operator_images):
    fault = Fault(lambda: restart_redis(redis_url), lambda: restore_redis(redis_url))
    run, raised = run_with(fault, tmp_path)
    m = read_manifest(run)
    assert m.status == "incomplete" and raised is not None
    reason = m.error
    assert "\n" not in reason and "Traceback" not in reason, reason
    assert "Redis lost the run's state at t=" in reason, reason
    assert time.monotonic() - fault.injected_at < 90
    assert_cleaned_up(rabbitmq_url, redis_url)
