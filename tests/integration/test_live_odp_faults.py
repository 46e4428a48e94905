"""Faults during an emulated-network live run (docs/papers/odp.md#faults-during-an-emulated-network-run):
the setting of tests/integration/test_live_odp.py (OEE topology, ODP placement on 4 hosts, every
instance with its own queues, senders delaying hops between hosts, every host at A = 0.9 and every
link between hosts at 0.95), with the faults injected from a thread while the run goes on. The
thread waits on the run's own progress (items processed, read from Redis; the replacement container
running; the drain's first stop signal, from Docker's events), never on fixed sleeps other than the
outage's own length, so a loaded machine only makes the run slower.

* **An operator container killed (SIGKILL) during a broker outage** (one run): O6 is stopped
  (SIGSTOP) until its queues hold items, RabbitMQ is stopped, O6 is killed, and the broker stays
  away for `BROKER_OUTAGE_S` after O6's replacement runs, longer than the 30 s the runtime used to
  wait for the replacement's queues before failing the run. The watchdog replaces O6 on its host at
  once (an action with its reason; exit code 137); its queues are declared and it joins the view
  when the broker is back, and it waits for the broker meanwhile; the items left in the killed
  instance's queues go to it (`details.network.rehomed`); the senders and the provider hold what they
  send while RabbitMQ is away. The run completes and every item is accounted for: per operator
  inflow = processed + unavailable + queued + dead, or more on the right (a duplicate of a
  redelivery can remain; never fewer: nothing lost).
* **A Redis restart during the final drain** (a second run): the runners' finished ids and counts
  and the senders' reports are gone while the instances finish; the run ends incomplete, with one
  line naming Redis and the time, never `complete` with totals that are not its own. A Redis restart
  mid-run ends a live run by the same watch (testbed/live/monitor.py, `RedisStateWatch`): in job
  mode live in tests/integration/test_live_job_faults.py, in operator mode in
  tests/unit/test_netem_faults.py (with a Redis away for longer than the outage limit).

In both, no container, queue or Redis key of the run is left, and the services are restored in a
`finally`. A starting runner against a broker that comes back: tests/integration/test_runner_broker_away.py."""
from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import docker
import pandas as pd
import pytest
import redis

from operators.api import processed_hash
from operators.wiring import INSTANCE_SEPARATOR
from testbed.eventlog import read_manifest
from testbed.experiment import run_experiment
from testbed.live.rabbit_management import ManagementClient
from testbed.live.run import LiveRunError
from testbed.live_config import LiveConfig

from .service_faults import BrokerOutage, restart_redis, restore_broker, restore_redis
from .test_live_run import config

pytestmark = [pytest.mark.integration, pytest.mark.live, pytest.mark.usefixtures("cpu_hog")]

AVAILABILITY = 0.9  # of every host
LINK_AVAILABILITY = 0.95  # of every link between two hosts: losses the senders decide and count
RUN = "constant-odp-live-1-"  # the run's prefix (its Redis keys and queues) starts with this
VICTIM = "O6"  # the busiest operator fed from another host: the provider's delayed copies go to it
MANAGEMENT_URL = LiveConfig().management_url
ITEMS_BEFORE_FAULT = 20  # processed by the victim before each fault (about 3 s of its input)
ITEM_DEADLINE_S = 120.0  # for those items, once its container runs (a loaded machine is slower)
START_DEADLINE_S = 300.0  # for the initial deployment (as LiveRun.DEPLOY_TIMEOUT_S)
# RabbitMQ stays stopped this long after the replacement runs: past the 30 s the runtime used to give
# the replacement's queues before it failed the run
BROKER_OUTAGE_S = 35.0
# the outage (from about 10 s in, for the replacement's start + BROKER_OUTAGE_S) and the replacement's
# work after it fit inside
FAULTY_RUN_MIN = 1.75
DRAIN_RUN_MIN = 0.5  # the Redis run: its drain is what counts


def settings(out: Path, duration_min: float) -> list:
    hosts = [f"+backend.emulation.availability.vm{k}={AVAILABILITY}" for k in range(1, 5)]
    return ["profile=paper", "pattern=constant", "pattern.levels=[1]", f"duration_min={duration_min}",
            "load_scale=0.5", "reps=1", "summary=false", "runtime.reasoning_s=10", "runtime.monitoring_s=3",
            "infrastructure.host_memory_mb=1600", "backend=docker", "backend.live.stop_timeout_s=20", f"out={out}",
            "backend.emulation.enabled=true", *hosts, f"backend.emulation.link_availability={LINK_AVAILABILITY}",
            "evaluation.configurations.0.name=odp", "evaluation.configurations.0.policy=static",
            "evaluation.configurations.0.placement=odp", "+evaluation.configurations.0.params={hosts: 4}",
            "evaluation.only=[odp]"]


def containers(operator: Optional[str] = None, running_only: bool = True) -> List:
    """The run's operator containers (labelled with the run's prefix and their operator)."""
    client = docker.from_env()
    try:
        labels = ["testbed.run"] + ([f"testbed.operator={operator}"] if operator else [])
        listed = client.containers.list(all=not running_only, sparse=True, filters={"label": labels})
        return [c for c in listed if (c.attrs.get("Labels") or {}).get("testbed.run", "").startswith(RUN)]
    finally:
        client.close()


def prefix_of(container) -> str:
    return container.attrs["Labels"]["testbed.run"]


def processed(redis_url: str, prefix: str, operator: str) -> int:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        return int(client.hget(processed_hash(prefix), operator) or 0)
    finally:
        client.close()


def wait_until(condition: Callable[[], bool], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not within {deadline_s:.0f} s")
        time.sleep(0.2)


class Faults(threading.Thread):
    """Runs `steps` once the victim's first container has processed ITEMS_BEFORE_FAULT items;
    `restore` runs in any case (also when a wait failed), so that the shared services come back."""

    def __init__(self, redis_url: str, steps: Callable[["Faults"], None], restore: Callable[[], None] = lambda: None):
        super().__init__(daemon=True)
        self.redis_url, self.steps, self.restore = redis_url, steps, restore
        self.prefix = ""
        self.log: dict = {}
        self.injected_at: Optional[float] = None
        self.started_wall = time.time()  # Docker's events are read from here on
        self.error: Optional[BaseException] = None

    def processed(self) -> int:
        return processed(self.redis_url, self.prefix, VICTIM)

    def wait_processed(self, at_least: int) -> None:
        wait_until(lambda: self.processed() >= at_least, ITEM_DEADLINE_S, f"{at_least} items processed by {VICTIM}")

    def run(self) -> None:
        try:
            wait_until(lambda: bool(containers(VICTIM)), START_DEADLINE_S, f"a {VICTIM} container of the run")
            self.prefix = prefix_of(containers(VICTIM)[0])
            self.wait_processed(ITEMS_BEFORE_FAULT)
            self.injected_at = time.monotonic()
            self.steps(self)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            try:
                self.restore()
            except BaseException as exc:
                self.error = self.error or exc


def kill_during_a_broker_outage(outage: BrokerOutage, faults: Faults) -> None:
    [victim] = containers(VICTIM)
    faults.log["killed"] = victim.attrs["Labels"]["testbed.instance"]
    # stopped first, so that its queues hold items when it dies however fast the machine is; SIGSTOP and
    # SIGKILL reach a container's PID 1 from the host
    victim.kill(signal="SIGSTOP")
    wait_until(lambda: queued_for(outage.url, faults.prefix, faults.log["killed"]) >= 1, ITEM_DEADLINE_S,
               f"items queued for the stopped {faults.log['killed']}")
    # the stopped instance processes nothing more, and its replacement can only consume once the broker
    # is back: whatever the operator processed beyond this, the replacement processed after the outage
    faults.log["processed_at_kill"] = faults.processed()
    with outage:  # armed before the run: the broker goes away at once
        faults.log["stopped"] = True
        victim.kill()  # SIGKILL, while the broker is away
        wait_until(lambda: any(c.attrs["Labels"]["testbed.instance"] != faults.log["killed"]
                               for c in containers(VICTIM)),
                   START_DEADLINE_S, f"the replacement of {faults.log['killed']}")
        time.sleep(BROKER_OUTAGE_S)  # the outage's length (not a wait for the machine)
    faults.log["restarted"] = True


def restart_redis_at_the_drain(faults: Faults) -> None:
    """Restart Redis as soon as the run's drain sends its first stop signal (SIGTERM) to an instance."""
    client = docker.from_env()
    try:
        events = client.events(decode=True, since=int(faults.started_wall), until=int(time.time() + START_DEADLINE_S),
                               filters={"event": "kill", "label": f"testbed.run={faults.prefix}"})
        if not any(e.get("Actor", {}).get("Attributes", {}).get("signal") == "15" for e in events):
            raise TimeoutError("no stop signal of the run's drain")
    finally:
        client.close()
    restart_redis(faults.redis_url)
    faults.log["redis_restarted_at"] = time.monotonic()


def queued_for(rabbitmq_url: str, prefix: str, instance: str) -> int:
    """Messages (ready and unacknowledged) in the input queues of one instance, from the management API
    (its figures lag by up to 5 s, which the caller's wait absorbs)."""
    stats = ManagementClient(MANAGEMENT_URL, rabbitmq_url).queue_stats(prefix)
    return sum(q.depth for name, q in stats.items() if name.endswith(f"{INSTANCE_SEPARATOR}{instance}"))


def queues_and_keys_left(prefix: str, redis_url: str, rabbitmq_url: str) -> dict:
    client = redis.Redis.from_url(redis_url)
    try:
        keys = [k.decode() for k in client.scan_iter(f"{prefix}*", count=1000)]
    finally:
        client.close()
    return {"keys": keys, "queues": ManagementClient(MANAGEMENT_URL, rabbitmq_url).names("queues", prefix)}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, rabbitmq_url, redis_url, docker_url, operator_images):
    out = tmp_path_factory.mktemp("odp-faults")
    outage = BrokerOutage(rabbitmq_url).arm()  # its CLI boots while the run deploys

    def restore():  # never leave the shared broker stopped
        outage.end()
        restore_broker(rabbitmq_url, "stopped" in faults.log and "restarted" not in faults.log)

    faults = Faults(redis_url, functools.partial(kill_during_a_broker_outage, outage), restore)
    faults.start()
    t0 = time.monotonic()
    try:
        [run_dir] = run_experiment(config(*settings(out, FAULTY_RUN_MIN)))
    finally:
        faults.join(timeout=300)
    print(f"the run with the kill during the broker outage took {time.monotonic() - t0:.0f} s; faults {faults.log}")
    assert faults.error is None, repr(faults.error)
    assert faults.log.get("restarted"), f"the broker restart did not happen during the run: {faults.log}"
    return run_dir, faults


def test_the_killed_instance_is_replaced_on_its_host_and_its_items_handed_on(faulty_run):
    run_dir, faults = faulty_run
    manifest = read_manifest(run_dir)
    assert manifest.status == "complete", manifest.error
    actions = pd.read_parquet(run_dir / "actions.parquet")
    replaced = actions[actions.action == "replace"]
    assert list(replaced.operator) == [VICTIM], actions.to_string()
    assert "watchdog" in replaced.reason.iloc[0] and faults.log["killed"] in replaced.reason.iloc[0]
    [crash] = manifest.details["crashes"]
    assert crash["instance"]["id"] == faults.log["killed"] and crash["exit_code"] == 137  # SIGKILL
    records = {r["id"]: r for r in manifest.details["instances"]}
    new = replaced.instance.iloc[0]
    assert records[new]["host"] == records[faults.log["killed"]]["host"] and records[new]["running_at"] is not None
    network = manifest.details["network"]
    assert faults.log["killed"] in network["gone"]
    assert network["declared_late"] == [new], network  # placed while the broker was away
    # the killed instance's queues held items (it was stopped first) and senders kept sending to it until
    # they saw it go
    assert network["rehomed"].get(VICTIM, 0) >= 1, network


def test_after_a_kill_and_a_broker_restart_every_item_is_accounted_for(faulty_run):
    run_dir, faults = faulty_run
    details = read_manifest(run_dir).details
    accounting = details["accounting"]
    assert details["provider_flushed"]
    assert details["provider_stats"]["reconnects"] >= 1  # the provider's sender did see the broker go
    # nothing lost: per operator inflow <= processed + unavailable + queued + dead (+ the rest, 0 here);
    # a duplicate (a copy republished after the restart, a redelivery processed twice) can only add
    assert all(m <= 0 for m in accounting["missing"].values()), json.dumps(accounting, indent=1)
    inflow, excess = sum(accounting["inflow"].values()), -sum(accounting["missing"].values())
    print(f"inflow {inflow}, on the right in excess {excess}: {accounting['missing']}")
    lost, done = sum(accounting["unavailable"].values()), sum(accounting["processed"].values())
    assert lost > 0 and done > 0  # the emulated losses went on through the faults
    # the victim's replacement worked after the broker came back
    assert accounting["processed"][VICTIM] > faults.log["processed_at_kill"]
    dropped = pd.read_parquet(run_dir / "dropped.parquet")
    assert int(dropped.loc[dropped.reason == "unavailable", "items"].sum()) <= lost


def test_nothing_of_the_faulty_run_is_left(faulty_run, redis_url, rabbitmq_url):
    run_dir, _ = faulty_run
    prefix = read_manifest(run_dir).details["prefix"]
    assert containers(running_only=False) == []
    assert queues_and_keys_left(prefix, redis_url, rabbitmq_url) == {"keys": [], "queues": []}


def test_a_redis_restart_during_the_final_drain_ends_the_run_incomplete_naming_it(tmp_path, rabbitmq_url, redis_url,
                                                                                   docker_url, operator_images):
    faults = Faults(redis_url, restart_redis_at_the_drain, lambda: restore_redis(redis_url))
    faults.start()
    raised = None
    t0 = time.monotonic()
    try:
        run_experiment(config(*settings(tmp_path, DRAIN_RUN_MIN)))
    except LiveRunError as exc:
        raised = exc
    finally:
        faults.join(timeout=300)
    ended = time.monotonic()
    print(f"the run with Redis restarted during its drain took {ended - t0:.0f} s")
    assert faults.error is None, repr(faults.error)
    assert raised is not None
    manifest = read_manifest(tmp_path / "constant" / "odp-live" / "1")
    assert manifest.status == "incomplete"
    reason = manifest.error
    assert "\n" not in reason and "Traceback" not in reason, reason
    assert "Redis lost the run's state at t=" in reason and "restarted" in reason, reason
    assert ended - faults.log["redis_restarted_at"] < 90  # the verdict comes with the drain's end
    assert containers(running_only=False) == []
    assert queues_and_keys_left(faults.prefix, redis_url, rabbitmq_url) == {"keys": [], "queues": []}
