"""Data-provider emission on this machine against the local RabbitMQ (publisher confirms, persistent).

Prints
* the paper's top load, 8 machines on the 480 ms schedule (267 items/s incl. 16.7 images/s), for
  DURATION seconds: the CPU the provider process used (process time / wall; target < 1 core) and the
  p99 tick lateness;
* the highest sustained emission rate: ticks emitted back to back (the schedule always behind, so
  it catches up as fast as it can) with the OEE item mix, for SATURATE seconds, counted as items
  *confirmed by the broker* per second of wall time including the final flush.

    .venv/bin/python benchmarks/bench_provider.py [DURATION_S=20] [SATURATE_S=10]

RabbitMQ is started with infra/services.sh if it is not running. Queues are deleted afterwards.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pika  # noqa: E402

from data_provider.config import DEFAULT_AMQP_URL, compose_provider  # noqa: E402
from data_provider.emitter import Emitter, SystemClock  # noqa: E402
from data_provider.provider import Provider, source_specs  # noqa: E402
from data_provider.transports import RabbitPublisher  # noqa: E402
from operators.wiring import delete, wiring_for  # noqa: E402
from testbed.workloads.patterns import make_pattern  # noqa: E402

MACHINES = 8


def ensure_rabbit(url: str) -> None:
    try:
        pika.BlockingConnection(pika.URLParameters(url)).close()
    except pika.exceptions.AMQPError:
        subprocess.run(["bash", str(ROOT / "infra" / "services.sh"), "start"], check=True)


def run(url: str, machines: int, seconds: float, tick_s: float | None):
    """Emit for ``seconds``; tick_s None = the topology's 480 ms, else back to back."""
    cfg = compose_provider(["pattern=constant", f"pattern.levels=[{machines}]", "transport=rabbitmq",
                            f"amqp_url={url}"])
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    wiring = wiring_for(cfg.topology, prefix)
    transport = RabbitPublisher(url, wiring, list(cfg.topology.sources), max_unconfirmed=20_000)
    tick = cfg.topology.tick_ms / 1000.0 if tick_s is None else tick_s
    provider = Provider(make_pattern(cfg.pattern), source_specs(cfg), transport, cfg.seed, cfg.topology.tick_ms,
                        cfg.payloads, SystemClock())
    n_ticks = int(seconds / tick) if tick_s is None else 10**9
    transport.start()
    emitter: Emitter

    def on_tick(_result):
        if time.perf_counter() - wall0 >= seconds:
            emitter.stop()

    emitter = Emitter(tick, n_ticks, provider.emit_tick, SystemClock(), on_tick=on_tick)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    emitter.run()
    emitted_s = time.perf_counter() - wall0
    flushed = transport.flush(120)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    stats = transport.stats
    transport.close()
    conn = pika.BlockingConnection(pika.URLParameters(url))
    delete(conn.channel(), wiring)
    conn.close()
    lateness = np.array([r.tick.lateness_ms for r in emitter.results])
    images = provider.items.get("S2_production", 0)
    return {
        "ticks": len(emitter.results), "items": stats.confirmed, "images": images, "flushed": flushed,
        "wall": wall, "emitted_s": emitted_s, "cpu": cpu,
        "p99_lateness_ms": float(np.percentile(lateness, 99)) if lateness.size else 0.0,
    }


def main() -> int:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    saturate = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    url = os.environ.get("AMQP_URL", DEFAULT_AMQP_URL)
    ensure_rabbit(url)
    print(f"data provider -> RabbitMQ (confirms, persistent) on {os.cpu_count()} cores", flush=True)

    top = run(url, MACHINES, duration, None)
    print(f"{MACHINES} machines, 480 ms ticks, {top['wall']:.1f} s: {top['items'] / top['wall']:.1f} items/s "
          f"({top['images'] / top['wall']:.1f} images/s), CPU {top['cpu'] / top['wall']:.2f} cores "
          f"(target < 1), p99 tick lateness {top['p99_lateness_ms']:.2f} ms, all confirmed: {top['flushed']}",
          flush=True)

    sat = run(url, MACHINES, saturate, 1e-6)
    rate = sat["items"] / sat["wall"]
    print(f"highest sustained rate ({saturate:g} s back to back, incl. final flush): {rate:.0f} items/s, "
          f"{sat['images'] / sat['wall']:.1f} images/s (= {rate / (16 / 0.48):.0f} machines), "
          f"CPU {sat['cpu'] / sat['wall']:.2f} cores, all confirmed: {sat['flushed']}")
    return 0 if top["flushed"] and sat["flushed"] else 1


if __name__ == "__main__":
    sys.exit(main())
