"""The broker and Redis side of pool activation and restarts in the live testbed.

An instance watches its activation flag in Redis (operators/api.py, `activation_key`): switched off,
it stops consuming, hands back what it has not started and finishes the rest. A restart with purge
empties every operator queue of the run on the broker and returns what each held (RabbitMQ's
queue.purge answers with the message count, so the drop is counted exactly)."""
from __future__ import annotations

from typing import Any, Dict

from operators.api import activation_key
from operators.wiring import Wiring


class RedisSwitchboard:
    def __init__(self, redis: Any, wiring: Wiring, amqp_url: str, kafka: bool = False):
        self.redis = redis
        self.wiring = wiring
        self.amqp_url = amqp_url
        self.kafka = kafka

    def set_active(self, instance: str, active: bool) -> None:
        self.redis.set(activation_key(self.wiring.prefix, instance), "1" if active else "0")

    def purge(self) -> Dict[str, int]:
        """Items purged per operator (the ready messages of its input queues)."""
        if self.kafka:
            raise NotImplementedError("a restart with purge needs RabbitMQ (Kafka topics cannot be purged per group)")
        import pika

        purged = {o: 0 for o in self.wiring.operators}
        conn = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
        try:
            channel = conn.channel()
            for edge in self.wiring.edges:
                frame = channel.queue_purge(edge.queue)
                purged[edge.consumer] += int(frame.method.message_count)
        finally:
            if conn.is_open:
                conn.close()
        return purged
