"""Throughput of one operator runner instance against a bare pika loop (`make bench`).

Both consume N persistent messages from a durable queue and publish each to a fanout exchange
(bound to a durable queue), persistent, with publisher confirms, acknowledging an input only after
its output is confirmed, at the same prefetch on the same broker. The runner is
`python -m operators.runner` with the trivial "passthrough" operator (JSON envelope decoded and
re-encoded, Redis duplicate check and metrics included); the bare loop is this file run as
`bench_runner.py bare ...` (one pika SelectConnection, confirms handled asynchronously). Each
runs in its own process, measured from outside the same way: from the first consumed input until
all N outputs are in the output queue. Best of REPEATS, alternating. Target: ratio >= 0.7.

    .venv/bin/python benchmarks/bench_runner.py [--messages 10000] [--prefetch 5,50] [--repeats 2]

Prefetch 5 is the runner's default (and visp's); 50 shows what a deeper pipeline buys both.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402

from operators.envelope import Envelope, amqp_properties  # noqa: E402
from operators.transports import OutMessage, RabbitPublisher, declare_wiring  # noqa: E402
from operators.wiring import delete, make_wiring  # noqa: E402

AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TOPOLOGY = {"sources": {"S": ["passthrough"]}, "operators": {"passthrough": ["sink"], "sink": []}}


# ---- the bare loop (run in its own process) --------------------------------------------------

def bare_loop(url: str, in_queue: str, out_exchange: str, prefetch: int, n: int) -> None:
    """Consume, publish persistent with confirms, ack each input once its output is confirmed."""
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    state = {"next_pub": 1, "acked": 0}
    waiting: dict = {}  # publish tag -> input delivery tag

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        def on_confirm(frame):
            m = frame.method
            tags = [t for t in waiting if t <= m.delivery_tag] if m.multiple else [m.delivery_tag]
            for t in tags:
                ch.basic_ack(waiting.pop(t))
                state["acked"] += 1
            if state["acked"] >= n:
                ch.connection.close()

        def on_message(_ch, method, _props, body):
            ch.basic_publish(out_exchange, "", body, props)
            waiting[state["next_pub"]] = method.delivery_tag
            state["next_pub"] += 1

        ch.confirm_delivery(ack_nack_callback=on_confirm,
                            callback=lambda _f: ch.basic_qos(
                                prefetch_count=prefetch,
                                callback=lambda _f2: ch.basic_consume(in_queue, on_message)))

    conn = pika.SelectConnection(pika.URLParameters(url), on_open_callback=on_open,
                                 on_close_callback=lambda c, _r: c.ioloop.stop())
    conn.ioloop.start()


# ---- the measurement -------------------------------------------------------------------------

def fill(url: str, wiring, n: int) -> None:
    pub = RabbitPublisher(url, wiring, ("S",), declare=False)
    pub.start()
    now = int(time.time() * 1000)
    msgs = []
    for i in range(n):
        env = Envelope(f"machine-01/S/{i}/0", "machine-01", "temperature", now, now,
                       {"temperature_c": 71.5, "timestamp_ms": now, "sensor": "t1"})
        msgs.append(OutMessage("S", env.item_id, env.machine_id, env.encode(), amqp_properties(env)))
    pub.publish_batch(msgs)
    if not pub.flush(120):
        raise RuntimeError("prefill not confirmed")
    pub.close()


def depth(ch, queue: str) -> int:
    return ch.queue_declare(queue=queue, passive=True).method.message_count


def measure(kind: str, prefetch: int, n: int) -> float:
    prefix = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    wiring = make_wiring(TOPOLOGY["sources"], TOPOLOGY["operators"], prefix)
    declare_wiring(AMQP_URL, wiring)
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    in_q, out_q = wiring.edge("S", "passthrough").queue, wiring.edge("passthrough", "sink").queue
    proc = None
    try:
        fill(AMQP_URL, wiring, n)
        if kind == "runner":
            env = dict(os.environ, OPERATOR="passthrough", RUN_PREFIX=prefix, TOPOLOGY=json.dumps(TOPOLOGY),
                       AMQP_URL=AMQP_URL, REDIS_URL=REDIS_URL, PREFETCH=str(prefetch), INSTANCE_ID="bench")
            cmd = [sys.executable, "-m", "operators.runner"]
        else:
            env = dict(os.environ)
            cmd = [sys.executable, str(Path(__file__).resolve()), "bare", AMQP_URL, in_q,
                   wiring.exchange("passthrough"),
                   str(prefetch), str(n)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while depth(ch, in_q) >= n:  # start-up (imports, connecting) is not measured
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not start consuming")
            time.sleep(0.002)
        t0 = time.perf_counter()
        while depth(ch, out_q) < n:
            if proc.poll() is not None and depth(ch, out_q) < n or time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: only {depth(ch, out_q)} of {n} outputs")
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        return n / elapsed
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(60)
        delete(ch, wiring)
        conn.close()
        if kind == "runner":
            import redis

            r = redis.Redis.from_url(REDIS_URL)
            keys = list(r.scan_iter(f"{prefix}:*", count=10_000))
            for i in range(0, len(keys), 1000):
                r.delete(*keys[i:i + 1000])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--prefetch", default="5,50", help="comma-separated prefetch values")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    print(f"runner vs bare pika loop: {a.messages} persistent messages each, publisher confirms, ack after "
          f"confirm, best of {a.repeats}")
    for prefetch in (int(p) for p in a.prefetch.split(",")):
        best = {"bare": 0.0, "runner": 0.0}
        for _ in range(a.repeats):
            for kind in ("bare", "runner"):
                best[kind] = max(best[kind], measure(kind, prefetch, a.messages))
        ratio = best["runner"] / best["bare"]
        print(f"  prefetch {prefetch:3d}: bare loop {best['bare']:6.0f} msg/s, runner {best['runner']:6.0f} msg/s, "
              f"ratio {ratio:.2f}   target >= 0.7")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bare":
        url, in_q, out_x, prefetch, n = sys.argv[2:7]
        bare_loop(url, in_q, out_x, int(prefetch), int(n))
    else:
        main()
