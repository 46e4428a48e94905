"""Broker names derived from the topology, and the message envelope."""
from __future__ import annotations

import json

import pytest

from operators.envelope import Envelope, EnvelopeError, amqp_properties, image_payload, payload_image
from operators.wiring import WiringError, declare, delete, kafka_topics, wiring_for


@pytest.fixture
def wiring(config):
    return wiring_for(config().topology, "run-7")


def test_every_producer_has_an_exchange_and_every_edge_a_queue(wiring):
    assert wiring.sources == ("S1_availability", "S2_production", "S3_temperature")
    assert wiring.exchange("S1_availability") == "run-7.S1_availability"
    assert wiring.exchange("O1") == "run-7.O1" == wiring.topic("O1")
    assert [e.queue for e in wiring.outputs("O1")] == ["run-7.O1.O3", "run-7.O1.O4", "run-7.O1.O5"]
    assert [e.queue for e in wiring.inputs("O8")] == ["run-7.O2.O8", "run-7.O6.O8", "run-7.O9.O8"]
    edge = wiring.edge("S2_production", "O1")
    assert edge.dead_letter_queue == "run-7.S2_production.O1.dead"
    assert edge.consumer_group == "run-7.S2_production.O1" and edge.topic == "run-7.S2_production"
    assert len(wiring.edges) == 3 + 3 + 1 + 1 + 1 + 1 + 1 + 1 + 1  # S1,S2,S3; O1x3; O2..O7, O9
    assert len(set(wiring.queues())) == len(wiring.edges)
    assert kafka_topics(wiring, ["S1_availability"]) == ("run-7.S1_availability",)


def test_prefixes_keep_runs_apart(config):
    a, b = wiring_for(config().topology, "a"), wiring_for(config().topology, "b")
    assert not set(a.queues()) & set(b.queues())


@pytest.mark.parametrize("prefix", ["", "has space", "dots.in.it", "x" * 101])
def test_bad_prefix_is_refused_naming_the_key(config, prefix):
    with pytest.raises(WiringError, match="^prefix"):
        wiring_for(config().topology, prefix)


def test_unknown_names_are_refused(wiring):
    with pytest.raises(WiringError, match="producer"):
        wiring.exchange("O10")
    with pytest.raises(WiringError, match="edge"):
        wiring.edge("O1", "O2")


class RecordingChannel:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda **kw: self.calls.append((name, kw))


def test_declare_makes_fanout_exchanges_durable_queues_and_dead_letters(wiring):
    ch = RecordingChannel()
    declare(ch, wiring, ["S1_availability"])
    assert ("exchange_declare", {"exchange": "run-7.dlx", "exchange_type": "direct", "durable": True}) in ch.calls
    assert ("exchange_declare", {"exchange": "run-7.S1_availability", "exchange_type": "fanout",
                                 "durable": True}) in ch.calls
    assert ("queue_declare", {"queue": "run-7.S1_availability.O2", "durable": True, "arguments": {
        "x-dead-letter-exchange": "run-7.dlx", "x-dead-letter-routing-key": "run-7.S1_availability.O2"}}) in ch.calls
    assert ("queue_bind", {"queue": "run-7.S1_availability.O2", "exchange": "run-7.S1_availability",
                           "routing_key": ""}) in ch.calls
    assert ("queue_bind", {"queue": "run-7.S1_availability.O2.dead", "exchange": "run-7.dlx",
                           "routing_key": "run-7.S1_availability.O2"}) in ch.calls
    assert not any("O1" in str(kw) for _, kw in ch.calls)
    ch = RecordingChannel()
    delete(ch, wiring)
    assert sum(1 for name, _ in ch.calls if name == "queue_delete") == 2 * len(wiring.edges)


def test_envelope_round_trip_and_properties():
    env = Envelope("machine-01/S1_availability/3/0", "machine-01", "availability", 1_763_788_800_123,
                   1_763_788_800_999, {"status": "available"})
    data = env.encode()
    assert json.loads(data)["v"] == 1
    assert Envelope.decode(data) == env
    props = amqp_properties(env)
    assert props["delivery_mode"] == 2 and props["timestamp"] == 1_763_788_800
    assert props["message_id"] == env.item_id and props["headers"] == {"sent_ms": 1_763_788_800_999}
    assert env.sent_at(5).sent_ms == 5


def test_image_payload_round_trip():
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    env = Envelope("i", "m", "production", 1, 2, image_payload(png))
    assert payload_image(Envelope.decode(env.encode()).payload) == png


@pytest.mark.parametrize("body, key", [
    (b"not json", "body"), (b"[1]", "body"), (b'{"v": 2}', "v"),
    (b'{"v":1,"id":"","machine":"m","type":"t","origin_ms":1,"sent_ms":2}', "id"),
    (b'{"v":1,"id":"i","machine":"m","type":"t","origin_ms":1.5,"sent_ms":2}', "origin_ms"),
    (b'{"v":1,"id":"i","machine":"m","type":"t","origin_ms":1,"sent_ms":2,"payload":[]}', "payload"),
])
def test_invalid_envelopes_name_the_field(body, key):
    with pytest.raises(EnvelopeError) as info:
        Envelope.decode(body)
    assert info.value.key == key
