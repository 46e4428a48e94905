"""The live host pool against the real Docker engine: labels and resource settings of its
containers, graceful drain on stop, crash detection, cleanup of a run, and the start-up check.
The containers run a tiny image built FROM the registry-free base (a Python loop that drains on
SIGTERM), tagged as every operator's image under a test prefix."""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import docker
import pytest

from testbed.config import ExperimentConfig
from testbed.live.engines import OWNER_LABEL, RUN_LABEL, EngineError, owner
from testbed.live.hostpool import HostPool
from testbed.live_config import EngineConfig
from testbed.model import InstanceState
from tests.conftest import compose_config
from tests.integration.conftest import BASE_IMAGE, ROOT, name_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cpu_hog")]  # TESTBED_CPU_HOG=1: one core busy

PREFIX, TAG = "testbed-pooltest-", "v1"
DRAIN_S = 0.6
WORKER = r'''
import os, signal, sys, time
def drain(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the pool repeats its SIGTERM (as operators/runner.py)
    print("draining", os.environ["INSTANCE_ID"], flush=True)
    time.sleep(float(os.environ.get("DRAIN_S", "0")))
    print("drained", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("started", os.environ["INSTANCE_ID"], flush=True)
if os.environ.get("EXIT_CODE"):
    print("failing on purpose", flush=True)
    sys.exit(int(os.environ["EXIT_CODE"]))
busy = bool(os.environ.get("BUSY"))  # burn a core: shows the host's CPU limit
while True:
    if not busy:
        time.sleep(0.1)
'''


@pytest.fixture(scope="module")
def client(docker_url) -> Iterator[docker.DockerClient]:
    c = docker.DockerClient(base_url=docker_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def test_images(client, tmp_path_factory) -> list[str]:
    """The worker image, tagged as each OEE operator's image under PREFIX:TAG."""
    ctx: Path = tmp_path_factory.mktemp("pool-image")
    (ctx / "worker.py").write_text(WORKER)
    # started as operators/Dockerfile starts the runner: SIGTERM ignored until the handler is installed
    # (the pool repeats it), so a stop right after `running` is drained, not fatal (exit 143)
    (ctx / "Dockerfile").write_text(f'FROM {BASE_IMAGE}\nCOPY worker.py /worker.py\n'
                                    'CMD ["/bin/sh", "-c", "trap \'\' TERM; exec python3 -u /worker.py"]\n')
    image, _ = client.images.build(path=str(ctx), tag=f"{PREFIX}worker:{TAG}", rm=True)
    tags = [f"{PREFIX}{o.lower()}:{TAG}" for o in compose_config().topology.operators]
    for tag in tags:
        repo, tag_ = tag.split(":")
        image.tag(repo, tag_)
    return tags


def pool_config(docker_url: str, host_cpu_shares: int = 4096, host_memory_mb: int = 7168, **live) -> ExperimentConfig:
    cfg = compose_config()
    cfg.backend.live.engines = [EngineConfig(docker_url, 4)]
    cfg.backend.live.image_prefix, cfg.backend.live.image_tag = PREFIX, TAG
    cfg.backend.live.network_mode = "none"
    cfg.backend.live.stop_timeout_s = 10.0
    for k, v in live.items():
        setattr(cfg.backend.live, k, v)
    cfg.infrastructure.host_cpu_shares, cfg.infrastructure.host_memory_mb = host_cpu_shares, host_memory_mb
    cfg.infrastructure.lease_delay_s = [0.3, 0.5]
    cfg.infrastructure.pull_mb_per_s = 200.0  # O1's 89 MB: 0.445 s
    return cfg


@pytest.fixture
def make_pool(docker_url, test_images) -> Iterator[Callable[..., HostPool]]:
    pools: list[HostPool] = []
    t0 = time.monotonic()

    def make(**options) -> HostPool:
        pool = HostPool(pool_config(docker_url, **options), f"pt-{uuid.uuid4().hex[:8]}",
                        clock=lambda: time.monotonic() - t0)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.cleanup()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def states(pool: HostPool) -> dict[str, InstanceState]:
    return {i.id: i.state for i in pool.instance_views()}


def run_containers(client, run_id: str) -> list:
    # sparse: no inspect per listed container, which fails (404) for one removed in between
    return client.containers.list(all=True, sparse=True, filters={"label": f"{RUN_LABEL}={run_id}"})



def test_lifecycle_labels_drain_crash_release(make_pool, client):
    pool = make_pool()
    pool.check_engines()
    host = pool.lease()
    a = pool.start_instance("O1", host, {"DRAIN_S": str(DRAIN_S), "FOO": "bar"})
    b = pool.start_instance("O3", host, {"DRAIN_S": "0"})
    assert a == f"{pool.run_id}-o1-1" and b == f"{pool.run_id}-o3-2"
    assert set(states(pool).values()) == {InstanceState.starting}  # non-blocking
    wait_for(lambda: set(states(pool).values()) == {InstanceState.running}, what="both instances running")

    attrs = client.api.inspect_container(a)
    assert attrs["Config"]["Labels"] == {"testbed.run": pool.run_id, "testbed.host": host,
                                         "testbed.operator": "O1", "testbed.instance": a, OWNER_LABEL: owner()}
    assert attrs["HostConfig"]["CpuShares"] == 660 and attrs["HostConfig"]["MemoryReservation"] == 452 * 2**20
    assert attrs["HostConfig"]["Memory"] == 0  # a reservation, no hard limit
    assert attrs["HostConfig"]["NetworkMode"] == "none" and attrs["Config"]["Image"] == f"{PREFIX}o1:{TAG}"
    assert {f"INSTANCE_ID={a}", "FOO=bar"} <= set(attrs["Config"]["Env"])
    assert client.api.inspect_container(b)["HostConfig"]["CpuShares"] == 100

    [view] = pool.host_views()
    assert view.ready and view.images == frozenset({"O1", "O3"})
    assert (view.cpu_free, view.memory_free) == (4096 - 760, 7168 - 882)
    rec = {r.id: r for r in pool.records()}
    # request -> running includes the host's boot (>= 0.3 s) and O1's emulated pull (0.445 s)
    assert rec[a].start_latency_s >= 0.3 + 89 / 200.0
    assert 0 < rec[a].container_start_s < 10
    print(f"\ncontainer start (docker run -> running): {rec[a].container_start_s:.3f} s, "
          f"{rec[b].container_start_s:.3f} s; "
          f"request -> running incl. boot and pull: {rec[a].start_latency_s:.3f} s")

    # graceful stop: draining at once, the handler runs, exit code 0 (SIGKILL would give 137)
    pool.stop_instance(a)
    assert states(pool)[a] == InstanceState.draining
    assert pool.host_views()[0].cpu_free == 4096 - 100  # a draining instance holds no reservation
    wait_for(lambda: a not in states(pool), what="drained instance gone")
    done = {r.id: r for r in pool.records()}[a]
    assert done.exit_code == 0 and not done.crashed and done.drain_s >= DRAIN_S
    assert a not in {name_of(c) for c in run_containers(client, pool.run_id)}

    # a container that dies unasked is reported once as crashed
    client.containers.get(b).kill()
    pool.refresh()
    [dead] = pool.take_crashed()
    assert (dead.id, dead.operator, dead.host) == (b, "O3", host)
    assert pool.take_crashed() == [] and b not in states(pool)
    [crash] = pool.crashed()
    assert crash.exit_code == 137 and "started" in (crash.error or "")

    pool.release(host)
    assert pool.host_views() == ()
    lease = pool.leases(end_t=pool.clock())
    assert lease["host"] == [host] and lease["released"] == [True] and lease["paid_btus"] == [1]
    assert pool.wait_idle(15)
    assert run_containers(client, pool.run_id) == []


def test_release_drains_instances_and_crash_at_start_is_reported(make_pool, client):
    pool = make_pool(emulate_pull=False)
    host = pool.lease(immediate=True)
    ok = pool.start_instance("O2", host, {"DRAIN_S": "0.3"})
    bad = pool.start_instance("O4", host, {"EXIT_CODE": "3"})
    wait_for(lambda: states(pool).get(ok) == InstanceState.running, what="instance running")
    wait_for(lambda: (pool.refresh() or True) and bad not in states(pool), what="failing instance reported")
    [dead] = pool.take_crashed()
    assert dead.id == bad
    [crash] = pool.crashed()
    assert crash.exit_code == 3 and "failing on purpose" in (crash.error or "")

    pool.release(host)  # stops what is left, then gives the host back
    [view] = pool.host_views()
    assert view.releasing and states(pool)[ok] == InstanceState.draining
    wait_for(lambda: pool.host_views() == (), what="host released after its instance drained")
    assert {r.id: r for r in pool.records()}[ok].exit_code == 0
    assert pool.leases(end_t=pool.clock())["released"] == [True]


def test_cleanup_removes_every_container_of_the_run(make_pool, client):
    pool = make_pool(emulate_pull=False)
    hosts = [pool.lease(immediate=True), pool.lease(immediate=True)]
    ids = [pool.start_instance(o, h, {}) for o, h in (("O1", hosts[0]), ("O5", hosts[0]), ("O7", hosts[1]))]
    wait_for(lambda: all(states(pool).get(i) == InstanceState.running for i in ids), what="instances running")
    late = pool.start_instance("O8", hosts[1], {})  # possibly still being created during cleanup
    other = make_pool(emulate_pull=False)  # another run on the same engine is left alone
    other_id = other.start_instance("O9", other.lease(immediate=True), {})
    wait_for(lambda: states(other).get(other_id) == InstanceState.running, what="other run's instance")

    removed = pool.cleanup()
    assert removed >= 3
    pool.wait_idle(15)
    assert run_containers(client, pool.run_id) == [], f"left behind after cleanup ({late})"
    assert pool.cleanup() == 0  # idempotent
    assert [name_of(c) for c in run_containers(client, other.run_id)] == [other_id]


def test_the_next_run_removes_the_containers_a_killed_run_left(make_pool, client, test_images):
    """A run's process killed outright leaves its containers; the next run's engine check removes
    them (their owner process is gone), and leaves those of a running process alone."""
    alive = make_pool(emulate_pull=False)  # a run whose process runs (this one): its containers stay
    kept = alive.start_instance("O9", alive.lease(immediate=True), {})
    wait_for(lambda: states(alive).get(kept) == InstanceState.running, what="the live run's instance")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner = owner(dead.pid)  # read while it runs or is a zombie: gone once waited for
    dead.wait()
    run_id = f"pt-killed-{uuid.uuid4().hex[:6]}"
    orphan = client.containers.run(test_images[0], detach=True, name=run_id, network_mode="none",
                                   labels={RUN_LABEL: run_id, OWNER_LABEL: dead_owner})
    try:
        pool = make_pool(emulate_pull=False)
        pool.check_engines()
        assert pool.reaped == {pool.book.engines[0].url: [run_id]}
        assert pool.engine_details()[0]["orphans_removed"] == [run_id]
        assert run_containers(client, run_id) == []
        assert [name_of(c) for c in run_containers(client, alive.run_id)] == [kept]
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            orphan.remove(force=True)


def test_check_engines_names_the_engine_and_the_missing_image(make_pool, docker_url):
    missing = make_pool(image_tag="no-such-tag")
    with pytest.raises(EngineError, match=rf"{docker_url}: missing operator image\(s\) {PREFIX}o1:no-such-tag"):
        missing.lease()
    assert missing.leases(end_t=1.0)["host"] == []

    unreachable = make_pool(engines=[EngineConfig(docker_url, 2), EngineConfig("tcp://127.0.0.1:1", 2)])
    with pytest.raises(EngineError, match=r"Docker engine tcp://127\.0\.0\.1:1: not reachable"):
        unreachable.check_engines()
    with pytest.raises(EngineError):
        unreachable.lease()
    assert unreachable.host_views() == ()


def cpu_seconds(cgroup: Path) -> float:
    return int((cgroup / "cpuacct.usage").read_text()) / 1e9


def test_cgroup_parent_enforces_the_hosts_cpu_and_memory(make_pool, client):
    pool = make_pool(cgroup_parent=True, emulate_pull=False, host_cpu_shares=512, host_memory_mb=600)
    pool.check_engines()  # the engine runs cgroupfs on cgroup v1 (else a clear EngineError)
    host = pool.lease(immediate=True)
    ident = pool.start_instance("O8", host, {"BUSY": "1"})
    wait_for(lambda: states(pool).get(ident) == InstanceState.running, what="instance running")
    holder = client.containers.get(f"{pool.run_id}-{host}")
    assert holder.labels["testbed.role"] == "host" and holder.labels["testbed.host"] == host
    assert holder.attrs["HostConfig"]["NanoCpus"] == 500_000_000 and holder.attrs["HostConfig"]["Memory"] == 600 * 2**20
    inst = client.api.inspect_container(ident)
    assert inst["HostConfig"]["CgroupParent"] == f"/docker/{holder.id}"
    cgroup = Path("/sys/fs/cgroup/cpuacct/docker") / holder.id
    if not cgroup.is_dir():
        pytest.skip("the engine's cgroups are not visible here (remote engine)")
    assert (cgroup / inst["Id"]).is_dir()  # nested below the host's cgroup
    before, t0 = cpu_seconds(cgroup), time.monotonic()
    time.sleep(1.5)
    cores = (cpu_seconds(cgroup) - before) / (time.monotonic() - t0)
    assert 0.05 < cores < 0.65, f"a busy loop used {cores:.2f} cores on a 0.5-core host"
    pool.release(host)
    wait_for(lambda: run_containers(client, pool.run_id) == [], what="instance and holder removed")
    assert pool.leases(end_t=pool.clock())["released"] == [True]


# -- the executor on the real pool: the simulator's semantics for migrations, releases and crashes --

def _executor(pool: HostPool):
    from testbed.live.executor import LiveExecutor
    from testbed.topology import Topology

    return LiveExecutor(pool, Topology.from_config(compose_config().topology).types, lambda o: {"DRAIN_S": "0.3"})


def test_executor_migrates_then_drains_the_old_copy(make_pool):
    from testbed.model import LeaseHost, Migrate, ScaleUp

    pool = make_pool()
    ex = _executor(pool)
    ex.apply(0.0, [LeaseHost("new:a", "t"), ScaleUp("O3", "new:a", "t"), LeaseHost("new:b", "t")], immediate=True)
    [old] = pool.instance_views()
    wait_for(lambda: states(pool)[old.id] == InstanceState.running, what="the first copy")
    host_a, host_b = old.host, next(h.id for h in pool.host_views() if h.id != old.host)
    ex.apply(1.0, [Migrate("O3", old.id, host_a, host_b, "t")])
    hosts, instances = ex.views(1.0)
    assert {i.id: i.state for i in instances}[old.id] == InstanceState.draining  # no longer counted
    assert next(h for h in hosts if h.id == host_a).cpu_free == 4096  # nor reserved
    new = next(i.id for i in instances if i.id != old.id)

    def moved() -> bool:
        ex.progress(2.0)
        return states(pool).get(new) == InstanceState.running and old.id not in states(pool)

    wait_for(moved, what="the copy running and the old instance drained")
    assert [(r.action, r.host, r.target_host) for r in ex.records][-1] == ("migrate", host_a, host_b)


def test_executor_releases_a_host_once_its_instances_have_stopped(make_pool):
    from testbed.model import LeaseHost, ReleaseHost, ScaleDown, ScaleUp

    pool = make_pool()
    ex = _executor(pool)
    ex.apply(0.0, [LeaseHost("new:a", "t"), ScaleUp("O5", "new:a", "t")], immediate=True)
    [inst] = pool.instance_views()
    wait_for(lambda: states(pool)[inst.id] == InstanceState.running, what="the instance")
    ex.apply(1.0, [ReleaseHost(inst.host, "t")])
    hosts, _ = ex.views(1.0)
    assert [h.releasing for h in hosts] == [True] and states(pool)[inst.id] == InstanceState.running
    ex.apply(2.0, [ScaleDown("O5", inst.id, inst.host, "t")])

    def released() -> bool:
        ex.progress(3.0)
        return not pool.host_views()

    wait_for(released, what="the release")
    assert pool.leases(10.0)["released"] == [True]


def test_executor_watchdog_replaces_a_killed_container(make_pool, client):
    from testbed.model import LeaseHost, ScaleUp

    pool = make_pool()
    ex = _executor(pool)
    ex.apply(0.0, [LeaseHost("new:a", "t"), ScaleUp("O4", "new:a", "t")], immediate=True)
    [inst] = pool.instance_views()
    wait_for(lambda: states(pool)[inst.id] == InstanceState.running, what="the instance")
    client.containers.get(inst.id).kill()

    def replaced() -> bool:
        pool.refresh()
        ex.replace_crashed(5.0)
        return any(r.action == "replace" for r in ex.records)

    wait_for(replaced, what="the watchdog")
    [record] = [r for r in ex.records if r.action == "replace"]
    assert record.operator == "O4" and inst.id in record.reason
    wait_for(lambda: states(pool).get(record.instance) == InstanceState.running, what="the replacement")


SLOW_START = r'''
import signal, sys, time
time.sleep(2.0)  # a start-up stretched by a loaded machine: no SIGTERM handler yet
def stop(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("handler installed", flush=True)
while True:
    time.sleep(0.1)
'''


@pytest.fixture(scope="module")
def slow_start_prefix(client, tmp_path_factory) -> str:
    """Images whose `operators.runner` installs its SIGTERM handler 2 s after the start, started by
    the very ENTRYPOINT of the operator images (operators/Dockerfile)."""
    entrypoint = re.search(r"^ENTRYPOINT .*$", (ROOT / "operators" / "Dockerfile").read_text(), re.M).group(0)
    ctx: Path = tmp_path_factory.mktemp("slow-start-image")
    (ctx / "operators").mkdir()
    (ctx / "operators" / "__init__.py").write_text("")
    (ctx / "operators" / "runner.py").write_text(SLOW_START)
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\nCOPY operators operators\n{entrypoint}\n")
    prefix = "testbed-slowstart-"
    image, _ = client.images.build(path=str(ctx), tag=f"{prefix}worker:{TAG}", rm=True)
    for o in compose_config().topology.operators:
        image.tag(f"{prefix}{o.lower()}", TAG)
    return prefix


def test_a_stop_during_start_up_is_neither_lost_nor_fatal(make_pool, slow_start_prefix):
    """Stopped while its process has no SIGTERM handler yet, an instance neither dies of the signal
    (143) nor ignores it until it is killed (137): it exits 0 once the handler is there."""
    pool = make_pool(image_prefix=slow_start_prefix)
    host = pool.lease()
    ids = [pool.start_instance("O3", host, {}) for _ in range(3)]
    wait_for(lambda: all(s == InstanceState.running for s in states(pool).values()), what="instances running")
    for i in ids:
        pool.stop_instance(i)
    wait_for(lambda: not states(pool), timeout_s=60, what="instances gone")
    records = {r.id: r for r in pool.records()}
    assert [records[i].exit_code for i in ids] == [0, 0, 0]
    assert not any(records[i].crashed for i in ids)
