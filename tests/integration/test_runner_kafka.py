"""The operator runner on the Kafka transport against a real Kafka-protocol broker (tansu) and
Redis: the same round trip as on RabbitMQ, dead-lettering into the edge's ``.dead`` topic, offsets
committed only for settled inputs, and a clean SIGTERM."""
from __future__ import annotations

import signal
import time
from typing import List

import pytest

from operators.api import dead_hash, processed_hash
from operators.envelope import Envelope
from operators.sources import dead_letter_topic
from operators.transports import create_topics
from operators.wiring import make_wiring

from .runner_helpers import RunnerProcess, items, runner_env

# kafka-python reads its protocol schemas with deprecated importlib.resources calls
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOPOLOGY = {"sources": {"S": ["A"]}, "operators": {"A": ["sink"], "sink": []}}


def read_topic(bootstrap: str, topic: str, want: int, timeout_s: float, proc: RunnerProcess) -> List[bytes]:
    """The first ``want`` records of the topic's partition 0 (assigned, no consumer group)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="test-reader")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: List[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < want:
            if time.monotonic() > deadline or proc.proc.poll() is not None:
                raise AssertionError(f"{len(got)} of {want} records on {topic}:\n{proc.log()}")
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        time.sleep(1.0)
        for records in consumer.poll(timeout_ms=500).values():  # nothing more (no duplicates)
            got.extend(r.value for r in records)
    finally:
        consumer.close()
    return got


def test_kafka_round_trip_dead_letters_commits_and_drains(kafka_bootstrap, redis_client, unique_prefix, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    wiring = make_wiring(TOPOLOGY["sources"], TOPOLOGY["operators"], unique_prefix)
    edge = wiring.edge("S", "A")
    create_topics(kafka_bootstrap, [wiring.topic("S"), wiring.topic("A"), dead_letter_topic(edge)])
    r = redis_client
    runner = RunnerProcess(runner_env("A", unique_prefix, TOPOLOGY, OPERATOR_IMPL="passthrough", TRANSPORT="kafka",
                                      KAFKA_BOOTSTRAP=kafka_bootstrap, PREFETCH=5), tmp_path / "A.log")
    try:
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        sent = items(30)
        for env in sent[:15]:
            producer.send(wiring.topic("S"), env.encode(), key=b"machine-01")
        producer.send(wiring.topic("S"), b"{broken", key=b"machine-01")
        for env in sent[15:]:
            producer.send(wiring.topic("S"), env.encode(), key=b"machine-01")
        producer.flush(30)
        producer.close()

        outs = [Envelope.decode(b) for b in read_topic(kafka_bootstrap, wiring.topic("A"), 30, 120, runner)]
        assert [o.item_id for o in outs] == [f"{e.item_id}/A" for e in sent]
        assert all(o.origin_ms == e.origin_ms and o.payload == e.payload for o, e in zip(outs, sent, strict=True))
        assert read_topic(kafka_bootstrap, dead_letter_topic(edge), 1, 30, runner) == [b"{broken"]

        runner.signal(signal.SIGTERM)
        assert runner.wait(30) == 0, runner.log()
        assert r.hget(processed_hash(unique_prefix), "A") == b"30"
        assert r.hget(dead_hash(unique_prefix), "A") == b"1"
        group = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=edge.consumer_group,
                              enable_auto_commit=False, client_id="test-offsets")
        try:  # the group's committed offset (a fetch, no join)
            committed = group.committed(TopicPartition(wiring.topic("S"), 0))
        finally:
            group.close()
        assert committed == 31  # every input settled (30 processed, 1 dead-lettered) is committed
    finally:
        runner.stop()
