"""The broker and Redis side of pool activation and restarts in the live testbed.

An instance watches its activation flag in Redis (operators/api.py, `activation_key`): switched off,
it stops consuming, hands back what it has not started and finishes the rest. A restart with purge
empties the operator queues of the run on the broker (the entry queues, fed by the sources, only when
asked) and returns what each held (RabbitMQ's queue.purge answers with the message count, so the
drop is counted exactly). With the emulated network the queues are the instances' own
(testbed/live/netem.py)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from operators.api import activation_key
from operators.wiring import Wiring


class RedisSwitchboard:
    def __init__(self, redis: Any, wiring: Wiring, amqp_url: str, kafka: bool = False,
                 queues: Optional[Callable[[], Wiring]] = None):
        self.redis = redis
        self.wiring = wiring
        self.amqp_url = amqp_url
        self.kafka = kafka
        # the wiring whose queues hold the items now (the emulated network: per-instance queues)
        self.queues = queues or (lambda: self.wiring)

    def set_active(self, instance: str, active: bool) -> None:
        self.redis.set(activation_key(self.wiring.prefix, instance), "1" if active else "0")

    def purge(self, entry: bool = True) -> Tuple[Dict[str, int], Dict[str, int]]:
        """Items purged per operator (the ready messages of its input queues) and, without `entry`,
        the ready messages kept in the queues the sources feed (a passive declare: exact)."""
        if self.kafka:
            raise NotImplementedError("a restart with purge needs RabbitMQ (Kafka topics cannot be purged per group)")
        import pika

        purged = {o: 0 for o in self.wiring.operators}
        kept: Dict[str, int] = {}
        conn = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
        try:
            channel = conn.channel()
            for edge in self.queues().edges:
                if not entry and edge.producer in self.wiring.sources:
                    frame = channel.queue_declare(edge.queue, passive=True)
                    kept[edge.consumer] = kept.get(edge.consumer, 0) + int(frame.method.message_count)
                    continue
                frame = channel.queue_purge(edge.queue)
                purged[edge.consumer] += int(frame.method.message_count)
        finally:
            if conn.is_open:
                conn.close()
        return purged, kept
