"""Speed of the live testbed's control path (`make bench`; needs dockerd, RabbitMQ and Redis, which
`make bench` starts).

1. One reasoning cycle at 100 instances on 10 hosts: monitoring read (RabbitMQ management API for
   the run's 26 queues + the Redis metrics of one monitoring interval), fresh depths, snapshot,
   policy decision and issuing its actions to the host pool (container starts run in the pool's
   background threads and are excluded). Target <= 1 s. The 100 instances are real containers of
   a tiny image (`sleep`), so the pool's Docker reconciliation (`refresh`) is measured for real;
   the decision alone is printed as the in-run baseline.
2. Container start latency of the real operator images (request -> running), one at a time and
   100 at once (the tiny image), as the pool records it.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pika  # noqa: E402
import redis  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from operators.api import metrics_stream, processed_hash  # noqa: E402
from operators.envelope import Envelope, amqp_properties  # noqa: E402
from operators.transports import declare_wiring  # noqa: E402
from operators.wiring import wiring_for  # noqa: E402
from testbed.config import CONF_DIR, register, to_typed, validate  # noqa: E402
from testbed.experiment import config_for, plan_runs, policy_for  # noqa: E402
from testbed.live.executor import LiveExecutor  # noqa: E402
from testbed.live.hostpool import HostPool  # noqa: E402
from testbed.live.monitor import LiveMonitor  # noqa: E402
from testbed.live.run import delete_wiring, operator_environment  # noqa: E402
from testbed.model import InstanceState, LeaseHost, ScaleUp  # noqa: E402
from testbed.topology import Topology  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HOSTS, INSTANCES = 10, 100
BENCH_PREFIX, BENCH_TAG = "testbed-bench-", "v1"
CYCLES = 10


def config(*overrides: str):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return validate(to_typed(compose("config", overrides=list(overrides))))


def build_tiny_image(operators) -> None:
    subprocess.run(["bash", str(ROOT / "infra" / "base-image.sh")], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as ctx:
        (Path(ctx) / "Dockerfile").write_text('FROM testbed-base:bookworm\nCMD ["sleep", "infinity"]\n')
        tags = [a for o in operators for a in ("-t", f"{BENCH_PREFIX}{o.lower()}:{BENCH_TAG}")]
        subprocess.run(["docker", "build", "-q", *tags, ctx], check=True, capture_output=True)


def wait_running(pool: HostPool, n: int, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(1 for i in pool.instance_views() if i.state == InstanceState.running) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("instances did not start in time")
        time.sleep(0.2)


def fill(cfg, wiring, topology) -> None:
    """What a busy monitoring interval leaves behind: queues with work and 15 s of metrics."""
    conn = pika.BlockingConnection(pika.URLParameters(cfg.backend.live.amqp_url))
    ch = conn.channel()
    for src in wiring.sources:
        env = Envelope(f"bench/{src}", "m00", "x", 0, 0, {})
        for _ in range(200):
            ch.basic_publish(wiring.exchange(src), "", env.encode(), pika.BasicProperties(**amqp_properties(env)))
    conn.close()
    r = redis.Redis.from_url(cfg.backend.live.redis_url)
    pipe = r.pipeline(transaction=False)
    now_ms = int(time.time() * 1000)
    for k in range(INSTANCES * 20):  # ~20 samples per instance per 15 s interval (every 10th item)
        o = topology.operators[k % len(topology.operators)]
        pipe.xadd(metrics_stream(wiring.prefix), {"operator": o, "instance": f"{o}-{k % 11}", "kind": "sample",
                                                  "t_ms": now_ms - k, "duration_ms": 400 + k % 900})
    for o in topology.operators:
        pipe.hincrby(processed_hash(wiring.prefix), o, 1000)
    pipe.execute()
    r.close()


@contextlib.contextmanager
def live_pool(cfg, name: str):
    """A host pool and the broker wiring of a benchmark run; everything removed afterwards."""
    run_id = f"bench-{name}-{int(time.time())}"
    wiring = wiring_for(cfg.topology, run_id)
    t0 = time.monotonic()
    clock = lambda: time.monotonic() - t0  # noqa: E731
    pool = HostPool(cfg, run_id, clock)
    pool.check_engines()
    declare_wiring(cfg.backend.live.amqp_url, wiring)
    try:
        yield pool, wiring, clock
    finally:
        pool.cleanup()
        delete_wiring(cfg.backend.live.amqp_url, wiring)
        r = redis.Redis.from_url(cfg.backend.live.redis_url)
        r.delete(metrics_stream(wiring.prefix), processed_hash(wiring.prefix))
        r.close()


def bench_cycle(policy_name: str) -> None:
    cfg = config("backend=docker", f"policy={policy_name}", "billing.btu_minutes=10",
                 f"backend.live.image_prefix={BENCH_PREFIX}", f"backend.live.image_tag={BENCH_TAG}",
                 "backend.live.stop_timeout_s=1", "infrastructure.lease_delay_s=[0,0]",
                 "infrastructure.host_memory_mb=16384", "infrastructure.host_cpu_shares=16384")
    topology = Topology.from_config(cfg.topology)
    with live_pool(cfg, policy_name) as (pool, wiring, clock):
        executor = LiveExecutor(pool, topology.types, lambda o: operator_environment(cfg, wiring, o, 10))
        actions = [LeaseHost(f"new:{h}", "bench") for h in range(HOSTS)]
        actions += [ScaleUp(topology.operators[k % 9], f"new:{k % HOSTS}", "bench") for k in range(INSTANCES)]
        started = time.monotonic()
        executor.apply(clock(), actions, immediate=True)
        wait_running(pool, INSTANCES)
        start_all_s = time.monotonic() - started
        fill(cfg, wiring, topology)
        time.sleep(6)  # one management statistics refresh
        monitor = LiveMonitor.from_config(cfg, topology, wiring, time.time() - 15, 600.0)
        policy = policy_for(config_for(cfg, plan_runs(cfg)[0]))
        cycle, decide, refresh = [], [], []
        for _ in range(CYCLES):
            a = time.perf_counter()
            pool.refresh()
            executor.progress(clock())
            b = time.perf_counter()
            monitor.observe(clock())
            depths = monitor.read_depths()
            hosts, instances = executor.views(clock())
            snap = monitor.snapshot(clock(), hosts, instances, executor.scalings, depths=depths.depths)
            c = time.perf_counter()
            acts = policy.decide(snap)
            d = time.perf_counter()
            executor.apply(clock(), acts)
            e = time.perf_counter()
            refresh.append(b - a)
            cycle.append(e - b)
            decide.append(d - c)
        med = statistics.median(cycle)
        print(f"{policy_name:>9} policy, {INSTANCES} instances on {HOSTS} hosts: reasoning cycle median "
              f"{med * 1000:.0f} ms, max {max(cycle) * 1000:.0f} ms (target <= 1000 ms); decision alone "
              f"{statistics.median(decide) * 1000:.1f} ms ({statistics.median(decide) / med:.2f} of the cycle); "
              f"watchdog refresh {statistics.median(refresh) * 1000:.0f} ms; last cycle issued {len(acts)} action(s)")
        latencies = [r.start_latency_s for r in pool.records()[:INSTANCES] if r.start_latency_s is not None]
        print(f"{'':>9} {INSTANCES} tiny containers started at once in {start_all_s:.1f} s: request -> running "
              f"median {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s")
        monitor.close()


def bench_operator_start() -> None:
    """Request -> running of each real operator image, one at a time (what a scale-up waits for)."""
    cfg = config("backend=docker", "infrastructure.lease_delay_s=[0,0]", "backend.live.stop_timeout_s=5")
    topology = Topology.from_config(cfg.topology)
    with live_pool(cfg, "start") as (pool, wiring, _clock):
        host = pool.lease(immediate=True)
        for o in topology.operators:
            pool.start_instance(o, host, operator_environment(cfg, wiring, o, 10), immediate=True)
            wait_running(pool, len(pool.records()))
        lat = [r.container_start_s for r in pool.records()]
        print(f"operator containers (testbed-o1..o9), one at a time: docker start -> running median "
              f"{statistics.median(lat):.2f} s, max {max(lat):.2f} s (the paper's VMs: 5-10 s)")


def main() -> int:
    subprocess.run(["bash", str(ROOT / "infra" / "docker.sh"), "start"], check=True, capture_output=True)
    ops = [f"O{i}" for i in range(1, 10)]
    build_tiny_image(ops)
    subprocess.run(["bash", str(ROOT / "infra" / "images.sh")], check=True, capture_output=True,
                   env={**os.environ, "PROVIDER": "0"})
    print("live control path:")
    for policy in ("btu", "threshold"):
        bench_cycle(policy)
    bench_operator_start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
