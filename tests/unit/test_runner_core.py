"""The runner's bookkeeping without a broker: an input is settled only after every emission is
confirmed; malformed, poison and failing inputs; stale deliveries; draining. The source and the
publisher here are in-memory stand-ins whose confirms the test releases by hand (the real ones
are exercised in tests/integration/test_runner_*.py)."""
from __future__ import annotations

import threading
import time
from typing import List, Sequence, Tuple

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from operators.api import Emission, OperatorContext, PoisonItem
from operators.envelope import Envelope
from operators.runner import Runner
from operators.runner_config import RunnerConfig
from operators.sources import Delivery, Outcome, dead_letter_topic
from operators.transports import OutMessage

TOPOLOGY = {"sources": {"S": ["A"]}, "operators": {"A": ["B"], "B": []}}


class HandSource:
    """Deliveries pushed by the test; settlements recorded."""

    def __init__(self, edges, dead_letters_by_publish=False):
        self.edges = edges
        self.dead_letters_by_publish = dead_letters_by_publish
        self.settled: List[Tuple[str, Outcome]] = []
        self.stale_tokens = set()
        self.closed_after: List[int] = []
        self._deliver = None

    def start(self, on_delivery, timeout_s=0):
        self._deliver = on_delivery

    def push(self, body: bytes, token):
        self._deliver(Delivery(body=body, edge=self.edges[0], token=token))

    def current(self, d):
        return d.token not in self.stale_tokens

    def settle(self, d, outcome):
        self.settled.append((d.token, outcome))

    def failure(self):
        return None

    def stop_consuming(self, timeout_s=0):
        pass

    def close(self, timeout_s=0):
        self.closed_after.append(len(self.settled))


class HandPublisher:
    """Keeps what is published until the test confirms it."""

    def __init__(self):
        self.on_confirm = None
        self.published: List[OutMessage] = []
        self.confirmed = 0
        self.lock = threading.Lock()

    def start(self, timeout_s=0):
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
    """Two emissions per input; payload {"poison": true} is poison, {"fail": true} a failure."""

    def __init__(self, ctx: OperatorContext):
        self.name = ctx.operator

    def process(self, item: Envelope):
        if item.payload.get("poison"):
            raise PoisonItem("poison")
        if item.payload.get("fail"):
            raise RuntimeError("dependency down")
        return [Emission(f"{item.item_id}/{self.name}/{k}", "x", {"k": k}) for k in range(2)]

    def close(self):
        pass


def wait_until(cond, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def envelope(i: int, **payload) -> bytes:
    return Envelope(f"m/S/{i}", "m", "reading", 1000, 2000, payload).encode()


@pytest.fixture
def make_runner():
    runners = []

    def make(dead_letters_by_publish=False, parallel=1):
        cfg = RunnerConfig(operator="A", prefix="p", topology=TOPOLOGY, dedup_ttl_s=0, metrics_flush_s=3600,
                           drain_timeout_s=5, parallel=parallel, sample_every=1)
        wiring = cfg.wiring()
        # nothing listens there: metrics flushes fail at once (and are kept), as with Redis away
        unreachable = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                                      retry=Retry(NoBackoff(), 0))
        source = HandSource(wiring.inputs("A"), dead_letters_by_publish)
        publisher = HandPublisher()
        ctx = OperatorContext("A", "a-1", "p", unreachable)
        runner = Runner(cfg, Twice(ctx), source, publisher, unreachable, sleep=lambda _s: None)
        runner.start()
        runners.append(runner)
        return runner, source, publisher

    yield make
    for r in runners:
        if r.held() == 0:
            r.drain()


def test_an_input_is_acknowledged_only_after_all_its_emissions_are_confirmed(make_runner):
    runner, source, publisher = make_runner()
    source.push(envelope(1), token=1)
    wait_until(lambda: len(publisher.published) == 2)
    assert [m.item_id for m in publisher.published] == ["m/S/1/A/0", "m/S/1/A/1"]
    assert {m.producer for m in publisher.published} == {"A"}
    assert all(Envelope.decode(m.body).origin_ms == 1000 for m in publisher.published)
    publisher.confirm(1)
    time.sleep(0.05)
    assert source.settled == [] and runner.held() == 1
    publisher.confirm(1)
    wait_until(lambda: source.settled == [(1, Outcome.ACK)])
    assert runner.held() == 0 and runner.stats.processed == 1 and runner.stats.emitted == 2
    assert runner.metrics.totals.processed == 1


def test_malformed_and_poison_inputs_are_dead_lettered_by_the_broker(make_runner):
    runner, source, publisher = make_runner()
    source.push(b"\xff not json", token=1)
    source.push(envelope(2, poison=True), token=2)
    wait_until(lambda: len(source.settled) == 2)
    assert source.settled == [(1, Outcome.DEAD), (2, Outcome.DEAD)]
    assert publisher.published == [] and runner.stats.dead == 2 and runner.metrics.totals.dead == 2


def test_on_kafka_a_dead_letter_is_written_to_its_topic_before_the_input_is_committed(make_runner):
    runner, source, publisher = make_runner(dead_letters_by_publish=True)
    source.push(b"{broken", token=7)
    wait_until(lambda: len(publisher.published) == 1)
    [m] = publisher.published
    assert m.destination == dead_letter_topic(source.edges[0]) == "p.S.A.dead" and m.body == b"{broken"
    assert source.settled == []
    publisher.confirm(1)
    wait_until(lambda: source.settled == [(7, Outcome.ACK)])
    assert runner.stats.dead == 1 and runner.stats.processed == 0


def test_an_operator_failure_requeues_the_input(make_runner):
    runner, source, publisher = make_runner()
    source.push(envelope(3, fail=True), token=3)
    wait_until(lambda: source.settled == [(3, Outcome.REQUEUE)])
    assert runner.stats.errors == 1 and publisher.published == []


def test_a_stale_delivery_is_neither_processed_nor_settled(make_runner):
    runner, source, publisher = make_runner()
    source.stale_tokens.add(4)
    source.push(envelope(4), token=4)
    wait_until(lambda: runner.stats.stale == 1)
    assert runner.held() == 0 and source.settled == [] and publisher.published == []


def test_drain_waits_for_held_inputs_and_settles_them_before_closing(make_runner):
    runner, source, publisher = make_runner()
    source.push(envelope(5), token=5)
    wait_until(lambda: len(publisher.published) == 2)
    drained = threading.Thread(target=runner.drain)
    drained.start()
    time.sleep(0.1)
    assert drained.is_alive() and source.closed_after == []  # still holding input 5
    publisher.confirm(2)
    drained.join(5)
    assert not drained.is_alive()
    assert source.settled == [(5, Outcome.ACK)] and source.closed_after == [1]  # acked, then closed
