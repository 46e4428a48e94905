"""The live run's accounting on the real RabbitMQ and Redis: an item left in a queue although its
runner already recorded it as finished (its acknowledgement lost in a broker restart) is recognised,
so that it counts once, as processed, and the queue keeps every message it held."""
from __future__ import annotations

import pika
import pytest

from operators.api import seen_key
from operators.envelope import Envelope
from operators.transports import declare_wiring
from operators.wiring import delete, make_wiring
from testbed.live.run import finished_in_queues
from testbed.live_config import LiveConfig

pytestmark = pytest.mark.integration


def test_finished_items_left_in_a_queue_are_recognised(rabbitmq_url, redis_url, redis_client, unique_prefix):
    wiring = make_wiring({"S": ["A"]}, {"A": ["B"], "B": []}, unique_prefix)
    declare_wiring(rabbitmq_url, wiring)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = conn.channel()
        by_queue = {"A": ("S", ["s1", "s2", "s3"]), "B": ("A", ["a1", "a2"])}
        for consumer, (producer, ids) in by_queue.items():
            queue = f"{unique_prefix}.{producer}.{consumer}"
            for item in ids:
                channel.basic_publish("", queue, Envelope(item, "m1", "t", 1, 1).encode())
        channel.basic_publish("", f"{unique_prefix}.S.A", b"not an envelope")
        # A finished s1 and s3, B finished a2; the same id from another producer is another item
        for key in (seen_key(unique_prefix, "A", "S", "s1"), seen_key(unique_prefix, "A", "S", "s3"),
                    seen_key(unique_prefix, "B", "A", "a2"), seen_key(unique_prefix, "B", "S", "a1")):
            redis_client.set(key, 1)
        live = LiveConfig(amqp_url=rabbitmq_url, redis_url=redis_url)

        assert finished_in_queues(live, wiring, {"A": 4, "B": 2}) == {"A": 2, "B": 1}
        assert finished_in_queues(live, wiring, {"A": 0, "B": 0}) == {}  # nothing queued: nothing read
        # read without acknowledging: every message is still there
        depths = {q: channel.queue_declare(q, passive=True).method.message_count
                  for q in (f"{unique_prefix}.S.A", f"{unique_prefix}.A.B")}
        assert depths == {f"{unique_prefix}.S.A": 4, f"{unique_prefix}.A.B": 2}
    finally:
        if conn.is_open:
            delete(conn.channel(), wiring)
            conn.close()
