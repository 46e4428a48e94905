"""The item flow of the live job mode (docs/papers/daedalus.md#live-runtime), as two threads of the
runtime's process, each on its own AMQP connection:

* `ItemSource` publishes the workload into the entry queue (the source backlog, as a Kafka topic
  holds it for a Flink job): in live second t, `arrivals[t]` items spread over the second in 20
  slots, each with the next id, a key drawn from the key distribution and its arrival time.
* `Router` is the job's source operator: it takes items from the entry queue and forwards them to
  the consistent-hash exchange (routing key = the item's key), only while fewer than the in-flight
  bound are forwarded and unprocessed (testbed/live/job_routing.py `InflightGate`); an entry item is
  acknowledged once the exchange confirmed it. A stop-the-world pauses it.

Both publish with confirms, so `emitted` and `forwarded` are what the broker holds."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Union

import numpy as np
import pika

from operators.keyed_job import Item, entry_queue, key_exchange
from testbed.live.job_routing import InflightGate

log = logging.getLogger(__name__)

SLOTS = 20  # publishing slots per second


def connect(amqp_url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(amqp_url))


class ItemSource:
    def __init__(self, amqp_url: str, prefix: str, arrivals: Union[Sequence[int], np.ndarray], keys: Sequence[str],
                 weights: Union[Sequence[float], np.ndarray], rng: np.random.Generator):
        self.amqp_url = amqp_url
        self.queue = entry_queue(prefix)
        self.arrivals = [int(a) for a in arrivals]
        self.keys = list(keys)
        self.weights = np.asarray(weights, dtype=float) / float(np.sum(weights))
        self.rng = rng
        self.emitted = 0
        self.per_second: List[int] = []  # items published in each live second so far
        self.t0_wall: Optional[float] = None  # time.time() of the first second's start
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-source", daemon=True)

    def start(self, t0_mono: float) -> None:
        self._t0 = t0_mono
        self.t0_wall = time.time() - (time.monotonic() - t0_mono)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            conn = connect(self.amqp_url)
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                self._emit(conn, ch)
            finally:
                if conn.is_open:
                    conn.close()
        except BaseException as exc:  # surfaced to the control loop, which fails the run
            self.error = exc

    def _emit(self, conn: Any, ch: Any) -> None:
        props = pika.BasicProperties(delivery_mode=1)
        for t, n in enumerate(self.arrivals):
            keys = self.rng.choice(len(self.keys), size=n, p=self.weights) if n else np.zeros(0, dtype=int)
            bounds = np.linspace(0, n, SLOTS + 1).astype(int)
            sent = 0
            for s in range(SLOTS):
                due = self._t0 + t + s / SLOTS
                while True:
                    if self._stop.is_set():
                        self.per_second.append(sent)
                        return
                    wait = due - time.monotonic()
                    if wait <= 0:
                        break
                    conn.process_data_events(time_limit=min(wait, 0.05))
                now_ms = int(time.time() * 1000)
                for k in keys[bounds[s]:bounds[s + 1]]:
                    item = Item(self.emitted, self.keys[k], now_ms)
                    ch.basic_publish("", self.queue, item.encode(), props)
                    self.emitted += 1
                    sent += 1
            self.per_second.append(sent)


class Router:
    POLL_S = 0.02  # how often the processed counts are read while the in-flight bound is reached

    def __init__(self, amqp_url: str, prefix: str, gate: InflightGate, processed_total: Callable[[], int],
                 prefetch: int = 50):
        self.amqp_url = amqp_url
        self.prefix = prefix
        self.gate = gate
        self.processed_total = processed_total
        self.prefetch = prefetch
        self.forwarded = 0  # in the whole run
        self.error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._paused = threading.Event()  # asked to pause
        self._idle = threading.Event()  # it is paused (no item between entry and exchange)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-router", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def pause(self, timeout_s: float) -> bool:
        """Stop forwarding; True once no item is between the entry queue and the exchange."""
        self._paused.set()
        return self._idle.wait(timeout_s)

    def resume(self, queued: int, limit: int) -> None:
        """Forward again; the workers' queues hold `queued` items (moved there by the restart)."""
        self.gate.restart(queued, self.processed_total(), limit)
        self._idle.clear()
        self._paused.clear()

    def stop(self) -> None:
        self._stop.set()
        self._paused.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            conn = connect(self.amqp_url)
            try:
                self._forward(conn)
            finally:
                if conn.is_open:
                    conn.close()  # items taken but not forwarded go back to the entry queue
        except BaseException as exc:
            self.error = exc
            self._idle.set()

    def _wait_unpaused(self, conn: Any) -> bool:
        """While paused: report idle and keep the connection alive. False when stopping."""
        while self._paused.is_set():
            self._idle.set()
            if self._stop.is_set():
                return False
            conn.process_data_events(time_limit=0.05)
        return not self._stop.is_set()

    def _forward(self, conn: Any) -> None:
        inbox = conn.channel()
        inbox.basic_qos(prefetch_count=self.prefetch)
        out = conn.channel()
        out.confirm_delivery()
        exchange = key_exchange(self.prefix)
        props = pika.BasicProperties(delivery_mode=1)
        processed = self.processed_total()
        for method, _props, body in inbox.consume(entry_queue(self.prefix), inactivity_timeout=0.05):
            if not self._wait_unpaused(conn):
                return
            if method is None:
                continue
            while self.gate.room(processed) <= 0:
                conn.process_data_events(time_limit=self.POLL_S)
                processed = self.processed_total()
                if self._paused.is_set() and not self._wait_unpaused(conn):
                    return
            try:
                key = Item.decode(body).key
            except ValueError:
                key = ""  # malformed: the exchange routes it by the empty key, the worker dead-letters it
            out.basic_publish(exchange, key, body, props, mandatory=True)
            inbox.basic_ack(method.delivery_tag)
            with self._lock:
                self.forwarded += 1
                self.gate.forwarded += 1
