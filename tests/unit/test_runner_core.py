"""The runner's bookkeeping without a broker: an input is settled only after every emission is
confirmed; malformed, poison and failing inputs; stale deliveries; draining. The source and the
publisher are in-memory stand-ins (tests/unit/runner_fakes.py) whose confirms the test releases
by hand."""
from __future__ import annotations

import threading
import time

import pytest

from operators.envelope import Envelope
from operators.sources import Outcome, dead_letter_topic
from tests.unit.runner_fakes import RunnerFactory, envelope, wait_until


@pytest.fixture
def make_runner():
    factory = RunnerFactory()
    yield factory.make
    factory.close()


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
