"""Broker names of a topology: exchanges, queues, dead-letter queues, Kafka topics and groups.

Derived from the topology config (``topology.sources`` and ``topology.operators`` with their
``downstream`` lists), so the data provider, the operators and the live runtime agree on every name
without repeating it. All names start with a configurable prefix (the run id), so parallel runs on
one broker never collide.

RabbitMQ (the visp layout, docs/papers/btu-provisioning.md#visp-operators):

* every producer (a source or an operator type) publishes to its own durable **fanout** exchange
  ``<prefix>.<producer>``;
* every edge producer → consumer is a durable queue ``<prefix>.<producer>.<consumer>`` bound to the
  producer's exchange, so a fanout to three consumers (O1 → O3, O4, O5) copies each item into three
  queues, and all instances of a consumer type compete on the same queue;
* one durable **direct** dead-letter exchange ``<prefix>.dlx`` per run; each edge queue dead-letters
  (rejected or expired messages) with its own queue name as routing key into its own dead-letter
  queue ``<prefix>.<producer>.<consumer>.dead``.

Kafka: one topic per producer, ``<prefix>.<producer>`` (the same string as the exchange); each
edge is a consumer group ``<prefix>.<producer>.<consumer>`` on that topic (the instances of a
consumer type share the group, as they share the queue).

Emulated network (``backend.emulation`` in the live testbed, docs/papers/odp.md): every operator
**instance** gets its own queue per input edge, ``<edge queue>@<instance>``, with its own dead-letter
queue ``<edge queue>@<instance>.dead``. These queues are not bound to any exchange: the sender picks
the receiving instance itself and publishes through the default exchange with the queue's name as
routing key (``instance_edges``, ``declare_instance_queues``; ``Wiring.with_instances`` is the
run's wiring with these queues in place of the shared ones, for depths, purges and cleanup).

``declare`` and ``delete`` act on a pika channel (blocking or not: only ``exchange_declare``,
``queue_declare``, ``queue_bind`` and their delete counterparts are called). Every user must declare
through here: RabbitMQ refuses to redeclare a queue with different arguments.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,60}$")  # source and operator names
DEAD_LETTER_SUFFIX = "dead"
DLX_NAME = "dlx"
INSTANCE_SEPARATOR = "@"  # <edge queue>@<instance>: '@' occurs in no prefix, operator or source name
MAX_QUEUE_NAME = 255  # RabbitMQ's limit (bytes)


class WiringError(ValueError):
    """An unusable name or edge; ``key`` names the offending setting."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Edge:
    producer: str
    consumer: str
    queue: str  # RabbitMQ queue, bound to the producer's exchange
    dead_letter_queue: str
    topic: str  # Kafka topic the consumer reads (the producer's)
    consumer_group: str  # Kafka consumer group of the consumer type on this edge


@dataclass(frozen=True)
class Wiring:
    """Every broker name of one run of one topology (names only; nothing here talks to a broker)."""

    prefix: str
    sources: Tuple[str, ...]
    operators: Tuple[str, ...]
    edges: Tuple[Edge, ...]
    dead_letter_exchange: str

    @property
    def producers(self) -> Tuple[str, ...]:
        return self.sources + self.operators

    def exchange(self, producer: str) -> str:
        self._check_producer(producer)
        return f"{self.prefix}.{producer}"

    def topic(self, producer: str) -> str:
        self._check_producer(producer)
        return f"{self.prefix}.{producer}"

    def outputs(self, producer: str) -> Tuple[Edge, ...]:
        self._check_producer(producer)
        return tuple(e for e in self.edges if e.producer == producer)

    def inputs(self, consumer: str) -> Tuple[Edge, ...]:
        if consumer not in self.operators:
            raise WiringError("consumer", f"unknown operator {consumer!r}; known: {', '.join(self.operators)}")
        return tuple(e for e in self.edges if e.consumer == consumer)

    def edge(self, producer: str, consumer: str) -> Edge:
        for e in self.edges:
            if e.producer == producer and e.consumer == consumer:
                return e
        raise WiringError("edge", f"no edge {producer} -> {consumer}")

    def queues(self) -> Tuple[str, ...]:
        return tuple(e.queue for e in self.edges)

    def with_instances(self, instances: Mapping[str, str]) -> "Wiring":
        """This wiring with per-instance queues (``{instance: operator}``) in place of the shared
        edge queues: every input edge of each instance's operator, once per instance."""
        edges = tuple(e for instance, operator in sorted(instances.items())
                      for e in instance_edges(self, operator, instance))
        return Wiring(prefix=self.prefix, sources=self.sources, operators=self.operators, edges=edges,
                      dead_letter_exchange=self.dead_letter_exchange)

    def _check_producer(self, producer: str) -> None:
        if producer not in self.sources and producer not in self.operators:
            raise WiringError("producer", f"unknown producer {producer!r}; known: {', '.join(self.producers)}")


def _check_name(key: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise WiringError(key, f"{name!r} is not a valid name (letters, digits, '_' and '-', at most 60)")


def make_wiring(sources: Mapping[str, Sequence[str]], operators: Mapping[str, Sequence[str]],
                prefix: str) -> Wiring:
    """Wiring from ``{source: downstream operators}`` and ``{operator: downstream operators}``."""
    if not PREFIX_RE.match(prefix):
        raise WiringError("prefix", f"{prefix!r} must be 1-100 letters, digits, '_' or '-' "
                                    "(starting with a letter or digit)")
    for s in sources:
        _check_name(f"topology.sources.{s}", s)
    for o in operators:
        _check_name(f"topology.operators.{o}", o)
    both = set(sources) & set(operators)
    if both:
        raise WiringError("topology", f"names used for both a source and an operator: {sorted(both)}")
    edges = []
    for kind, table in (("sources", sources), ("operators", operators)):
        for producer, downstream in table.items():
            for consumer in downstream:
                if consumer not in operators:
                    raise WiringError(f"topology.{kind}.{producer}.downstream", f"unknown operator {consumer!r}")
                queue = f"{prefix}.{producer}.{consumer}"
                edges.append(Edge(
                    producer=producer, consumer=consumer, queue=queue,
                    dead_letter_queue=f"{queue}.{DEAD_LETTER_SUFFIX}",
                    topic=f"{prefix}.{producer}", consumer_group=queue,
                ))
    return Wiring(prefix=prefix, sources=tuple(sources), operators=tuple(operators), edges=tuple(edges),
                  dead_letter_exchange=f"{prefix}.{DLX_NAME}")


def instance_queue(edge: Edge, instance: str) -> str:
    """The queue of one instance on one of its operator's input edges."""
    if not instance or INSTANCE_SEPARATOR in instance:
        raise WiringError("instance", f"{instance!r} is not a usable instance id (non-empty, no '@')")
    name = f"{edge.queue}{INSTANCE_SEPARATOR}{instance}"
    if len(f"{name}.{DEAD_LETTER_SUFFIX}".encode()) > MAX_QUEUE_NAME:
        raise WiringError("instance", f"queue name {name!r} too long for RabbitMQ ({MAX_QUEUE_NAME} bytes)")
    return name


def instance_edges(wiring: Wiring, operator: str, instance: str) -> Tuple[Edge, ...]:
    """The input edges of ``operator`` as seen by one of its instances: its own queues (Kafka
    names unchanged: the emulated network needs RabbitMQ)."""
    out = []
    for e in wiring.inputs(operator):
        queue = instance_queue(e, instance)
        out.append(Edge(producer=e.producer, consumer=e.consumer, queue=queue,
                        dead_letter_queue=f"{queue}.{DEAD_LETTER_SUFFIX}", topic=e.topic,
                        consumer_group=e.consumer_group))
    return tuple(out)


def wiring_for(topology: Any, prefix: str) -> Wiring:
    """Wiring of a ``testbed.config.TopologyConfig`` (anything with ``sources``/``operators``
    mappings whose values have ``downstream``)."""
    return make_wiring(
        {name: list(src.downstream) for name, src in topology.sources.items()},
        {name: list(op.downstream) for name, op in topology.operators.items()},
        prefix,
    )


# ---- RabbitMQ --------------------------------------------------------------------------------

def queue_arguments(wiring: Wiring, edge: Edge) -> dict:
    return {"x-dead-letter-exchange": wiring.dead_letter_exchange, "x-dead-letter-routing-key": edge.queue}


def _selected(wiring: Wiring, producers: Optional[Iterable[str]]) -> Tuple[Tuple[str, ...], Tuple[Edge, ...]]:
    chosen = tuple(wiring.producers if producers is None else producers)
    for p in chosen:
        wiring._check_producer(p)
    return chosen, tuple(e for e in wiring.edges if e.producer in chosen)


def declare(channel: Any, wiring: Wiring, producers: Optional[Iterable[str]] = None) -> None:
    """Declare (idempotently) the exchanges of ``producers`` (default: all), their outgoing edge
    queues bound to them, the dead-letter exchange and the edges' dead-letter queues."""
    chosen, edges = _selected(wiring, producers)
    channel.exchange_declare(exchange=wiring.dead_letter_exchange, exchange_type="direct", durable=True)
    for p in chosen:
        channel.exchange_declare(exchange=wiring.exchange(p), exchange_type="fanout", durable=True)
    for e in edges:
        channel.queue_declare(queue=e.dead_letter_queue, durable=True)
        channel.queue_bind(queue=e.dead_letter_queue, exchange=wiring.dead_letter_exchange, routing_key=e.queue)
        channel.queue_declare(queue=e.queue, durable=True, arguments=queue_arguments(wiring, e))
        channel.queue_bind(queue=e.queue, exchange=wiring.exchange(e.producer), routing_key="")


def declare_instance_queues(channel: Any, wiring: Wiring, edges: Iterable[Edge]) -> None:
    """Declare (idempotently) per-instance queues (``instance_edges``) and their dead-letter queues;
    the queues stay unbound (senders address them through the default exchange)."""
    channel.exchange_declare(exchange=wiring.dead_letter_exchange, exchange_type="direct", durable=True)
    for e in edges:
        channel.queue_declare(queue=e.dead_letter_queue, durable=True)
        channel.queue_bind(queue=e.dead_letter_queue, exchange=wiring.dead_letter_exchange, routing_key=e.queue)
        channel.queue_declare(queue=e.queue, durable=True, arguments=queue_arguments(wiring, e))


def delete_queues(channel: Any, edges: Iterable[Edge]) -> None:
    """Delete the queues (and dead-letter queues) of ``edges`` only (per-instance queues)."""
    for e in edges:
        channel.queue_delete(queue=e.queue)
        channel.queue_delete(queue=e.dead_letter_queue)


def delete(channel: Any, wiring: Wiring, producers: Optional[Iterable[str]] = None) -> None:
    """Delete what ``declare`` made (tests, cleanup of a finished run)."""
    chosen, edges = _selected(wiring, producers)
    for e in edges:
        channel.queue_delete(queue=e.queue)
        channel.queue_delete(queue=e.dead_letter_queue)
    for p in chosen:
        channel.exchange_delete(exchange=wiring.exchange(p))
    if producers is None:
        channel.exchange_delete(exchange=wiring.dead_letter_exchange)


# ---- Kafka -----------------------------------------------------------------------------------

def kafka_topics(wiring: Wiring, producers: Optional[Iterable[str]] = None) -> Tuple[str, ...]:
    chosen, _ = _selected(wiring, producers)
    return tuple(wiring.topic(p) for p in chosen)
