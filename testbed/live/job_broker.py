"""The live job's topology on RabbitMQ (docs/papers/daedalus.md#live-runtime): the entry queue, the
consistent-hash exchange, one queue per worker slot and the dead-letter queue; binding workers to
the exchange, probing where it sends every key, moving queued items through it again after a
rescale, the queues' depths at the end and their removal."""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Sequence, Tuple

from operators.keyed_job import dead_queue, entry_queue, key_exchange, worker_queue
from testbed.live.job_faults import LiveJobError
from testbed.live.job_flow import connect as amqp_connect
from testbed.live.job_routing import RING_WEIGHT, committed_id

CONSISTENT_HASH = "x-consistent-hash"


class Broker:
    def __init__(self, amqp_url: str, prefix: str, top: int) -> None:
        self.amqp_url, self.prefix, self.top = amqp_url, prefix, top
        self.exchange = key_exchange(prefix)

    def declare(self) -> None:
        import pika.exceptions

        conn = amqp_connect(self.amqp_url)
        try:
            ch = conn.channel()
            try:
                ch.exchange_declare(self.exchange, exchange_type=CONSISTENT_HASH, auto_delete=False)
            except pika.exceptions.ChannelClosedByBroker as exc:
                raise LiveJobError(f"RabbitMQ refused the {CONSISTENT_HASH} exchange ({exc}): enable the plugin "
                                   "with `bash infra/services.sh install` "
                                   "(rabbitmq_consistent_hash_exchange)") from exc
            ch.queue_declare(entry_queue(self.prefix))
            ch.queue_declare(dead_queue(self.prefix))
            for w in range(self.top):
                ch.queue_declare(worker_queue(self.prefix, w), arguments={
                    "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_queue(self.prefix)})
        finally:
            conn.close()

    def bind(self, bind: Sequence[int], unbind: Sequence[int]) -> None:
        conn = amqp_connect(self.amqp_url)
        try:
            ch = conn.channel()
            for w in bind:
                ch.queue_bind(worker_queue(self.prefix, w), self.exchange, routing_key=str(RING_WEIGHT))
            for w in unbind:
                ch.queue_unbind(worker_queue(self.prefix, w), self.exchange, routing_key=str(RING_WEIGHT))
        finally:
            conn.close()

    def probe(self, keys: Sequence[str]) -> Dict[int, Dict[str, int]]:
        """For every scale-out n: the worker each key goes to, from one probe item per key through
        the exchange with queues 0..n-1 bound (the ring grows as a rescale grows it)."""
        owners: Dict[int, Dict[str, int]] = {}
        conn = amqp_connect(self.amqp_url)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for n in range(1, self.top + 1):
                ch.queue_bind(worker_queue(self.prefix, n - 1), self.exchange, routing_key=str(RING_WEIGHT))
                owners[n] = self._probe_owners(ch, keys, n)
            for w in range(self.top):
                ch.queue_unbind(worker_queue(self.prefix, w), self.exchange, routing_key=str(RING_WEIGHT))
        finally:
            conn.close()
        return owners

    def _probe_owners(self, ch: Any, keys: Sequence[str], n: int) -> Dict[str, int]:
        import pika

        for k in keys:
            ch.basic_publish(self.exchange, k, k.encode(), pika.BasicProperties(delivery_mode=1), mandatory=True)
        owner: Dict[str, int] = {}
        for w in range(n):
            while True:
                method, _p, body = ch.basic_get(worker_queue(self.prefix, w), auto_ack=True)
                if method is None:
                    break
                owner[body.decode()] = w
        if set(owner) != set(keys):
            raise LiveJobError(f"probe with {n} workers: {len(owner)} of {len(keys)} keys came back")
        return owner

    def move(self, old: int, drop: FrozenSet[int] = frozenset()) -> Tuple[int, int]:
        """Every item in the queues of workers 0..old-1 through the exchange again, under the new
        binding (a queue that stays bound gets some back: only its items from before are taken);
        items whose id is in `drop` (committed already) are removed instead. (moved, dropped)."""
        import pika

        conn = amqp_connect(self.amqp_url)
        moved = dropped = 0
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=1)
            for w in range(old):
                q = worker_queue(self.prefix, w)
                for _ in range(ch.queue_declare(q, passive=True).method.message_count):
                    method, _p, body = ch.basic_get(q, auto_ack=False)
                    if method is None:
                        break
                    if drop and committed_id(body) in drop:
                        dropped += 1
                    else:
                        ch.basic_publish(self.exchange, method.routing_key, body, props, mandatory=True)
                        moved += 1
                    ch.basic_ack(method.delivery_tag)
        finally:
            conn.close()
        return moved, dropped

    def depths(self, ch: Any) -> Tuple[int, int, int]:
        """(entry queue, every worker queue, dead-letter queue) on channel `ch`."""
        d = lambda q: ch.queue_declare(q, passive=True).method.message_count  # noqa: E731
        return (d(entry_queue(self.prefix)), sum(d(worker_queue(self.prefix, w)) for w in range(self.top)),
                d(dead_queue(self.prefix)))

    def settled_depths(self, timeout_s: float, clock: Any) -> Tuple[int, int, int]:
        """The depths once the broker has requeued what closed channels held: two readings agree."""
        conn = amqp_connect(self.amqp_url)
        try:
            ch = conn.channel()
            now, before = self.depths(ch), None
            deadline = clock.now() + timeout_s
            while now != before and clock.now() < deadline:
                clock.sleep(0.5)
                before, now = now, self.depths(ch)
            return now
        finally:
            conn.close()

    def delete(self) -> None:
        """The run's queues and exchange (one gone already is fine: a broker restart takes transient queues)."""
        import pika.exceptions

        p = self.prefix
        queues = [entry_queue(p), dead_queue(p), *(worker_queue(p, w) for w in range(self.top))]
        names: List[Tuple[str, str]] = [("queue", q) for q in queues]
        conn = amqp_connect(self.amqp_url)
        try:
            for kind, name in [*names, ("exchange", self.exchange)]:
                try:
                    ch = conn.channel()
                    if kind == "queue":
                        ch.queue_delete(name)
                    else:
                        ch.exchange_delete(name)
                except pika.exceptions.ChannelClosedByBroker:
                    pass
        finally:
            if conn.is_open:
                conn.close()
