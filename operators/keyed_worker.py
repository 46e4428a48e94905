"""A keyed worker of the live job mode (docs/papers/daedalus.md#live-runtime): one container per
worker, with a CPU quota; ``python -m operators.keyed_worker`` (names: operators/keyed_job.py).

Per item from its queue: burn ``BURN_MS`` of CPU time (thread CPU time, so the cost per item is the
same whether or not the quota throttles the container), add one to the item's key in its pending
state and keep every ``LATENCY_EVERY``-th item's latency. Every ``CHECKPOINT_S`` it commits: the
pending key counts, its committed count and the latency samples go to Redis in one transaction,
then every item up to the last is acknowledged (one multiple ack). Between checkpoints nothing is
acknowledged, so a stop-the-world (control ``stop:<epoch>``) closes the channel and the broker
redelivers every item processed since the last checkpoint: the checkpoint replay of a Flink job.
The pending state is dropped with it (the job restarts from its checkpoint), so the keyed state in
Redis counts every item exactly once. ``final:<epoch>`` commits and stops (the end of a run).
The checkpoint also records the ids it committed (hash ``lastcommit``): a worker killed between its
commit and its ack leaves them in the queues, committed, and the runtime's recovery drops them.

Environment: RUN_PREFIX and WORKER (required), AMQP_URL, REDIS_URL, BURN_MS (1.0), PREFETCH (2000:
must hold a checkpoint's items, which stay unacknowledged until it), CHECKPOINT_S (5), LATENCY_EVERY
(5), FLUSH_S (0.1: the processed count is written this often), CONTROL_POLL_S (0.1).
SIGTERM: leave at once without committing (what a crash would do); the runtime stops workers with
``final`` first at the end of a run. The container starts the interpreter with SIGTERM ignored
(testbed/live/job.py), so a stop during start-up waits for the handler `main` installs.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional

from operators.keyed_job import Item, ItemError, redis_key, worker_name, worker_queue

log = logging.getLogger("operators.keyed_worker")


@dataclass(frozen=True)
class WorkerConfig:
    prefix: str
    worker: int
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    redis_url: str = "redis://127.0.0.1:6379/0"
    burn_ms: float = 1.0
    prefetch: int = 2000
    checkpoint_s: float = 5.0
    latency_every: int = 5
    flush_s: float = 0.1
    control_poll_s: float = 0.1

    @staticmethod
    def from_env(env: Mapping[str, str]) -> "WorkerConfig":
        def num(var: str, default: float, cast: Callable[[str], Any] = float) -> Any:
            raw = env.get(var, "").strip()
            try:
                return cast(raw) if raw else default
            except ValueError:
                raise SystemExit(f"{var}: expected a number, got {raw!r}") from None

        for var in ("RUN_PREFIX", "WORKER"):
            if not env.get(var, "").strip():
                raise SystemExit(f"{var}: is required")
        cfg = WorkerConfig(prefix=env["RUN_PREFIX"].strip(), worker=num("WORKER", 0, int),
                           amqp_url=env.get("AMQP_URL", "").strip() or WorkerConfig.amqp_url,
                           redis_url=env.get("REDIS_URL", "").strip() or WorkerConfig.redis_url,
                           burn_ms=num("BURN_MS", 1.0), prefetch=num("PREFETCH", 2000, int),
                           checkpoint_s=num("CHECKPOINT_S", 5.0), latency_every=num("LATENCY_EVERY", 5, int),
                           flush_s=num("FLUSH_S", 0.1), control_poll_s=num("CONTROL_POLL_S", 0.1))
        for var, value in (("WORKER", cfg.worker), ("BURN_MS", cfg.burn_ms)):
            if value < 0:
                raise SystemExit(f"{var}: must not be negative, got {value}")
        for var, value in (("PREFETCH", cfg.prefetch), ("CHECKPOINT_S", cfg.checkpoint_s),
                           ("LATENCY_EVERY", cfg.latency_every), ("FLUSH_S", cfg.flush_s),
                           ("CONTROL_POLL_S", cfg.control_poll_s)):
            if not value > 0:
                raise SystemExit(f"{var}: must be > 0, got {value}")
        return cfg


def burn(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU time (not wall time: throttling does not shorten it)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


class KeyedWorker:
    def __init__(self, cfg: WorkerConfig, redis_client: Any, connection: Any) -> None:  # redis.Redis, pika connection
        self.cfg = cfg
        self.redis = redis_client
        self.conn = connection
        self.name = worker_name(cfg.worker)
        self.queue = worker_queue(cfg.prefix, cfg.worker)
        self.keys = {k: redis_key(cfg.prefix, k) for k in ("control", "phase", "processed", "committed", "state",
                                                          "latency", "lastcommit")}
        self.channel: Optional[Any] = None  # a pika channel while consuming
        self.consumer: Optional[Any] = None
        self.epoch: Optional[str] = None  # the epoch it consumes in
        self.processed = 0
        self.flushed = 0  # of processed, written to Redis
        self.pending: Counter = Counter()
        self.pending_n = 0
        self.pending_latency: List[str] = []
        self.pending_ids: List[int] = []
        self.last_tag = 0
        self.stopping = False

    # -- control ------------------------------------------------------------------------------
    def report(self, phase: str) -> None:
        self.redis.hset(self.keys["phase"], self.name, phase)

    def control(self) -> str:
        raw = self.redis.get(self.keys["control"])
        return raw.decode() if raw else ""

    def run(self) -> None:
        self.report("idle:")
        next_poll = next_flush = 0.0
        ctl = ""
        last_ckpt = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if now >= next_poll:
                ctl, next_poll = self.control(), now + self.cfg.control_poll_s
                verb, _, epoch = ctl.partition(":")
                if self.channel is None and verb == "run" and epoch != self.epoch:
                    self.start(epoch)
                    last_ckpt = time.monotonic()
                elif self.channel is not None and verb == "stop":
                    self.stop_the_world(epoch)
                elif verb == "final" and self.epoch != f"final-{epoch}":
                    if self.channel is not None:
                        self.commit()
                        self.close_channel()
                    self.epoch = f"final-{epoch}"
                    self.flush()
                    self.report(f"final:{epoch}")
            if now >= next_flush:
                self.flush()
                next_flush = now + self.cfg.flush_s
            if self.channel is None:
                self.conn.process_data_events(time_limit=self.cfg.control_poll_s)
                continue
            if now - last_ckpt >= self.cfg.checkpoint_s:
                self.commit()
                last_ckpt = now
            assert self.consumer is not None  # set with the channel
            method, _props, body = next(self.consumer)
            if method is not None:
                self.handle(method.delivery_tag, body)

    def start(self, epoch: str) -> None:
        self.channel = self.conn.channel()
        self.channel.basic_qos(prefetch_count=self.cfg.prefetch)
        self.consumer = self.channel.consume(self.queue, inactivity_timeout=0.02)
        self.epoch = epoch
        self.report(f"running:{epoch}")

    def close_channel(self) -> None:
        """Close the channel without acknowledging: the broker requeues what it holds for us."""
        channel, self.channel, self.consumer = self.channel, None, None
        if channel is not None and channel.is_open:
            channel.close()
        self.last_tag = 0

    def stop_the_world(self, epoch: str) -> None:
        self.close_channel()
        self.pending.clear()  # back to the checkpoint: the state since is lost, its items come again
        self.pending_n = 0
        self.pending_latency.clear()
        self.pending_ids.clear()
        self.flush()
        self.report(f"stopped:{epoch}")

    # -- items --------------------------------------------------------------------------------
    def handle(self, tag: int, body: bytes) -> None:
        try:
            item = Item.decode(body)
        except ItemError:
            assert self.channel is not None  # deliveries arrive only while consuming
            self.channel.basic_reject(tag, requeue=False)  # dead-lettered
            return
        burn(self.cfg.burn_ms / 1000.0)
        self.pending[item.key] += 1
        self.pending_n += 1
        self.pending_ids.append(item.id)
        self.processed += 1
        self.last_tag = tag
        if item.id % self.cfg.latency_every == 0:
            done = int(time.time() * 1000)
            self.pending_latency.append(f"{done},{done - item.arrived_ms}")

    def commit(self) -> None:
        """The checkpoint: state, committed count and latency samples in one transaction, then the ack."""
        if self.pending_n:
            pipe = self.redis.pipeline(transaction=True)
            for key, n in self.pending.items():
                pipe.hincrby(self.keys["state"], key, n)
            pipe.hincrby(self.keys["committed"], self.name, self.pending_n)
            if self.pending_latency:
                pipe.rpush(self.keys["latency"], *self.pending_latency)
            # the ids of this checkpoint: if the worker dies before its ack reaches the broker, they come
            # back to the queues committed already; the runtime's recovery drops them (testbed/live/job.py)
            pipe.hset(self.keys["lastcommit"], self.name, ",".join(map(str, self.pending_ids)))
            pipe.execute()
        if self.last_tag and self.channel is not None:
            self.channel.basic_ack(self.last_tag, multiple=True)
        self.pending.clear()
        self.pending_n = 0
        self.pending_latency.clear()
        self.pending_ids.clear()
        self.last_tag = 0

    def flush(self) -> None:
        """Add what it processed since the last flush (a worker started again under the same name
        goes on from its predecessor's count: the runtime's totals never go down)."""
        delta = self.processed - self.flushed
        if delta:
            self.redis.hincrby(self.keys["processed"], self.name, delta)
            self.flushed = self.processed


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import pika
    import redis

    cfg = WorkerConfig.from_env(os.environ)
    client = redis.Redis.from_url(cfg.redis_url)
    conn = pika.BlockingConnection(pika.URLParameters(cfg.amqp_url))
    worker = KeyedWorker(cfg, client, conn)

    def on_term(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        worker.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log.info("keyed worker %s on %s (burn %.3f ms per item, checkpoint %.1f s)", worker.name, worker.queue,
             cfg.burn_ms, cfg.checkpoint_s)
    try:
        worker.run()
    finally:
        worker.flush()
        if conn.is_open:
            conn.close()  # unacknowledged items go back to the queue
    return 0


if __name__ == "__main__":
    sys.exit(main())
