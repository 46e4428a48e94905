"""In-memory stand-ins for the runner's source, publisher, operator and activation store, shared by
the runner's unit tests (the real ones are exercised in tests/integration/test_runner_*.py)."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any, DefaultDict, List, Sequence, Tuple

import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from operators.api import ACTIVE, Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.runner import Runner
from operators.runner_config import RunnerConfig
from operators.sources import Delivery, Outcome
from operators.transports import OutMessage

TOPOLOGY = {"sources": {"S": ["A"]}, "operators": {"A": ["B"], "B": []}}


class HandSource:
    """Deliveries pushed by the test; settlements and pause/resume/release calls recorded."""

    def __init__(self, edges, dead_letters_by_publish=False):
        self.edges = edges
        self.dead_letters_by_publish = dead_letters_by_publish
        self.settled: List[Tuple[Any, Outcome]] = []
        self.stale_tokens = set()
        self.closed_after: List[int] = []
        self.calls: List[str] = []  # "pause", "resume", "release" in order
        self.paused = False
        self._deliver = None

    def start(self, on_delivery, timeout_s=0, cancel=None):
        self._deliver = on_delivery

    def push(self, body: bytes, token):
        self._deliver(Delivery(body=body, edge=self.edges[0], token=token))

    def current(self, d):
        return d.token not in self.stale_tokens

    def settle(self, d, outcome):
        self.settled.append((d.token, outcome))

    def failure(self):
        return None

    def pause(self, timeout_s=0):
        self.paused = True
        self.calls.append("pause")
        return True

    def resume(self):
        self.paused = False
        self.calls.append("resume")

    def release(self, timeout_s=0):
        self.calls.append("release")
        return True

    def close(self, timeout_s=0):
        self.closed_after.append(len(self.settled))


class HandPublisher:
    """Keeps what is published until the test confirms it."""

    def __init__(self):
        self.on_confirm = None
        self.published: List[OutMessage] = []
        self.confirmed = 0
        self.lock = threading.Lock()

    def start(self, timeout_s=0, cancel=None):
        pass

    def publish_batch(self, messages: Sequence[OutMessage]):
        with self.lock:
            self.published.extend(messages)

    def confirm(self, n: int):
        with self.lock:
            batch = self.published[self.confirmed:self.confirmed + n]
            self.confirmed += len(batch)
        self.on_confirm(batch)

    def close(self, timeout_s=0):
        pass


class Twice:
    """Two emissions per input; payload {"poison": true} is poison, {"fail": true} a failure,
    {"gate": name} sets ``started[name]`` and waits for ``gates[name]`` (an item in process)."""

    def __init__(self, ctx: OperatorContext):
        self.name = ctx.operator
        self.started: DefaultDict[str, threading.Event] = defaultdict(threading.Event)
        self.gates: DefaultDict[str, threading.Event] = defaultdict(threading.Event)

    def process(self, item: Envelope):
        if item.payload.get("poison"):
            raise PoisonItem("poison")
        if item.payload.get("fail"):
            raise RuntimeError("dependency down")
        gate = item.payload.get("gate")
        if gate:
            self.started[gate].set()
            assert self.gates[gate].wait(10)
        return [Emission(f"{item.item_id}/{self.name}/{k}", "x", {"k": k}) for k in range(2)]

    def close(self):
        pass


class FlagStore:
    """The activation flag and the instance's reports, in memory."""

    def __init__(self, on: bool = True):
        self.on = on
        self.reports: List[str] = []

    def wanted(self) -> bool:
        return self.on

    def claim_active(self) -> bool:
        if self.on:
            self.reports.append(ACTIVE)
        return self.on

    def report(self, state: str) -> None:
        self.reports.append(state)


def wait_until(cond, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def envelope(i: int, **payload) -> bytes:
    return Envelope(f"m/S/{i}", "m", "reading", 1000, 2000, payload).encode()


class RunnerFactory:
    """Started runners on the fakes; ``close`` drains those that hold nothing."""

    def __init__(self):
        self.runners: List[Runner] = []

    def make(self, dead_letters_by_publish=False, parallel=1, flag: FlagStore = None, prefetch=5):
        cfg = RunnerConfig(operator="A", prefix="p", topology=TOPOLOGY, dedup_ttl_s=0, metrics_flush_s=3600,
                           drain_timeout_s=5, parallel=parallel, sample_every=1, prefetch=prefetch,
                           activation_poll_s=0.01)
        wiring = cfg.wiring()
        # nothing listens there: metrics flushes fail at once (and are kept), as with Redis away
        unreachable = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                                      retry=Retry(NoBackoff(), 0))
        source = HandSource(wiring.inputs("A"), dead_letters_by_publish)
        publisher = HandPublisher()
        operator = Twice(OperatorContext("A", "a-1", "p", unreachable))
        runner = Runner(cfg, operator, source, publisher, unreachable, sleep=lambda _s: None,
                        activation=flag or FlagStore())
        runner.start()
        self.runners.append(runner)
        return runner, source, publisher

    def close(self):
        for r in self.runners:
            if r.held() == 0:
                r.drain()
