"""Where an operator instance's inputs come from: RabbitMQ queues or Kafka consumer groups.

A source hands each input to the runner as a ``Delivery`` and later gets told how to settle it
(``ack``: processed and every emission confirmed; ``dead``: never processable; ``requeue``: try
again; ``release``: handed back unstarted because the instance is switched off). Settling is
asynchronous and may come from any thread.

Pool activation (``operators/api.py``): ``pause`` stops deliveries (returns once no more come),
``release`` returns once the broker has applied every settlement so far and the instance holds
nothing, ``resume`` consumes again. ``pause`` before ``start`` starts without consuming.

* ``RabbitSource`` (pika ``SelectConnection`` in its own I/O thread): one consumer per input edge
  queue with ``basic_qos(prefetch)`` each, manual acks; ``dead`` is a ``basic_nack`` without
  requeue, which the queue's dead-letter arguments route into the edge's ``.dead`` queue; ``release``
  a ``basic_nack`` with requeue (other consumers get the input at once). Pausing cancels the
  consumers; ``release`` applies the pending settlements and waits for a synchronous round trip on
  the channel (``basic.qos``), which the broker answers only after the acks before it. After a
  lost connection it reconnects with backoff; deliveries of the old connection are *stale* (the
  broker redelivers them), their settlements are dropped.
* ``KafkaSource`` (kafka-python): one consumer per input edge (its consumer group), auto-commit
  off; at most ``prefetch`` inputs of an edge are outstanding, and the committed offset of a
  partition only moves past inputs that are settled (the lowest outstanding offset). A paused
  instance stops fetching but stays in its groups until ``release``: that commits what is settled
  and leaves the groups (released inputs stay uncommitted), so the partitions go to the active
  members; ``resume`` joins again.
"""
from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from operators.rabbit_connection import ReconnectingConnection, safe_url
from operators.transports import KAFKA_START_S, TransportError, create_topics, wait_ready
from operators.wiring import Edge

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    ACK = "ack"
    DEAD = "dead"
    REQUEUE = "requeue"
    RELEASE = "release"  # not started: back to the broker for another (active) instance


@dataclass(eq=False)
class Delivery:
    body: bytes
    edge: Edge
    token: Any  # the source's handle (connection generation and tag / partition and offset)
    amqp_timestamp_s: Optional[int] = None


DeliveryCallback = Callable[[Delivery], None]


# ---- RabbitMQ --------------------------------------------------------------------------------

class RabbitSource(ReconnectingConnection):
    dead_letters_by_publish = False  # the broker dead-letters a nack(requeue=False)
    role = "rabbit source"

    def __init__(self, url: str, edges: Sequence[Edge], prefetch: int,
                 reconnect_initial_s: float = 0.2, reconnect_max_s: float = 5.0, name: str = ""):
        self.url = url
        self.name = name  # the connection's name at the broker (rabbitmqctl, management UI)
        self.edges = tuple(edges)
        self.prefetch = prefetch
        self.reconnect_initial_s = reconnect_initial_s
        self.reconnect_max_s = reconnect_max_s
        self._on_delivery: Optional[DeliveryCallback] = None
        self._lock = threading.Lock()
        self._generation = 0  # bumped per connection: older deliveries are stale
        self._conn: Any = None
        self._channel: Any = None
        self._consumer_tags: Dict[str, Edge] = {}
        self._settle: Deque[Tuple[Delivery, Outcome]] = collections.deque()
        self._settle_scheduled = False
        self._ready = threading.Event()  # the first channel is set up (consuming unless paused)
        self._cancelled = threading.Event()  # pause done: no consumer left (or no connection)
        self._paused = threading.Event()
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- runner side -------------------------------------------------------------------------

    def start(self, on_delivery: DeliveryCallback, timeout_s: Optional[float] = 30.0,
              cancel: Optional[threading.Event] = None) -> None:
        """Connect (reconnecting as after a lost connection) until it consumes: within ``timeout_s``,
        or (None) until then or until ``cancel`` is set."""
        self._on_delivery = on_delivery
        self._thread = threading.Thread(target=self._serve_connections, name="rabbit-source", daemon=True)
        self._thread.start()
        try:
            wait_ready(self._ready, timeout_s, cancel, lambda: f"RabbitMQ at {safe_url(self.url)}: not consuming")
        except TransportError:
            self._stopping.set()
            raise

    def failure(self) -> Optional[str]:
        """Never fatal: a lost connection is re-established."""
        return None

    def current(self, delivery: Delivery) -> bool:
        """False for a delivery of a lost connection (the broker redelivers it)."""
        return delivery.token[0] == self._generation

    def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        with self._lock:
            self._settle.append((delivery, outcome))
            if self._settle_scheduled:
                return
            self._settle_scheduled = True
        if not self._call_in_loop(self._apply_settlements):  # reconnecting: these deliveries are stale anyway
            with self._lock:
                self._settle_scheduled = False

    def pause(self, timeout_s: float = 10.0) -> bool:
        """Cancel the consumers; returns when the broker confirmed (no more deliveries)."""
        self._cancelled.clear()
        self._paused.set()
        if self._channel is None or not self._call_in_loop(self._cancel):
            self._cancelled.set()  # no channel: nothing consumes (a new one will not while paused)
        if not self._cancelled.wait(timeout_s):
            log.warning("consumers not cancelled within %.0f s", timeout_s)
            return False
        return True

    def resume(self) -> None:
        self._paused.clear()
        self._call_in_loop(self._consume_unless_paused)  # no loop: the next connection consumes

    def release(self, timeout_s: float = 10.0) -> bool:
        """True once the broker has applied every settlement handed over so far (or the connection
        is gone, which gives everything back); False on timeout."""
        done = threading.Event()
        if not self._call_in_loop(lambda: self._barrier(done)):
            return True
        return done.wait(timeout_s)

    def _call_in_loop(self, callback: Callable[[], None]) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.ioloop.add_callback_threadsafe(callback)
            return True
        except Exception:  # noqa: BLE001 - the loop is gone (reconnecting)
            return False

    def close(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.ioloop.add_callback_threadsafe(self._close_connection)
            except Exception:  # noqa: BLE001 - already closed
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- I/O thread --------------------------------------------------------------------------

    def _configure(self, params: Any) -> None:
        if self.name:
            params.client_properties = {"connection_name": self.name}

    def _open_failed(self, err: Any) -> None:
        log.warning("rabbit source: cannot connect to %s: %r", safe_url(self.url), err)

    def _closed(self, reason: Any) -> None:
        log.warning("rabbit source: connection closed: %r", reason)

    def _lost(self, had_channel: bool) -> bool:
        with self._lock:
            self._generation += 1  # what this connection delivered is now stale
            self._settle.clear()
            self._settle_scheduled = False
        self._consumer_tags.clear()
        if self._paused.is_set():
            self._cancelled.set()  # nothing consumes any more
        return had_channel

    def _on_channel_open(self, channel: Any) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        self._channel = channel
        channel.basic_qos(prefetch_count=self.prefetch, callback=lambda _f: self._on_qos())

    def _on_qos(self) -> None:
        self._consume_unless_paused()
        self._ready.set()

    def _consume_unless_paused(self) -> None:
        channel = self._channel
        if self._paused.is_set():
            self._cancelled.set()
            return
        if channel is None or not channel.is_open or self._consumer_tags:
            return  # no channel (its successor consumes) or consuming already
        generation = self._generation
        for edge in self.edges:
            tag = channel.basic_consume(edge.queue, self._handler(edge, generation), auto_ack=False)
            self._consumer_tags[tag] = edge

    def _handler(self, edge: Edge, generation: int) -> Callable[..., None]:
        def on_message(_channel: Any, method: Any, props: Any, body: bytes) -> None:
            self._on_delivery(Delivery(  # type: ignore[misc]
                body=body, edge=edge, token=(generation, method.delivery_tag), amqp_timestamp_s=props.timestamp))
        return on_message

    def _on_channel_closed(self, _channel: Any, reason: Any) -> None:
        self._channel = None
        if not self._stopping.is_set():
            log.warning("rabbit source: channel closed: %r", reason)
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()  # start over on a fresh connection (the broker redelivers what we held)

    def _cancel(self) -> None:
        """Cancel the consumers one after the other: pika hands a ``CancelOk`` to every callback
        waiting for one, so with several outstanding the first reply would look like all of them."""
        channel = self._channel
        if channel is None or not channel.is_open or not self._consumer_tags:
            self._cancelled.set()
            return
        tag = next(iter(self._consumer_tags))

        def done(_frame: Any) -> None:
            self._consumer_tags.pop(tag, None)
            if self._consumer_tags:
                self._cancel()
            else:
                self._cancelled.set()
                self._consume_unless_paused()  # resumed while the cancel was under way

        channel.basic_cancel(tag, callback=done)

    def _apply_settlements(self) -> None:
        with self._lock:
            items = list(self._settle)
            self._settle.clear()
            self._settle_scheduled = False
            generation = self._generation
        channel = self._channel
        if channel is None or not channel.is_open:
            return
        for delivery, outcome in items:
            gen, tag = delivery.token
            if gen != generation:
                continue  # delivered on a lost connection: redelivered by now
            if outcome is Outcome.ACK:
                channel.basic_ack(tag)
            else:
                channel.basic_nack(tag, requeue=outcome is not Outcome.DEAD)

    def _barrier(self, done: threading.Event) -> None:
        """Send the pending settlements, then a synchronous method: its reply comes after the
        broker has processed them (frames of a channel are handled in order)."""
        self._apply_settlements()
        channel = self._channel
        if channel is None or not channel.is_open:
            done.set()  # the channel's end gave everything back
            return
        channel.basic_qos(prefetch_count=self.prefetch, callback=lambda _f: done.set())


# ---- Kafka -----------------------------------------------------------------------------------

@dataclass
class _EdgeState:
    """One edge's consumer bookkeeping (touched only by its poll thread, except ``settled`` and
    the events)."""

    edge: Edge
    outstanding: Dict[Any, List[int]] = field(default_factory=dict)  # partition -> offsets held
    next_offset: Dict[Any, int] = field(default_factory=dict)  # partition -> after the last polled
    committed: Dict[Any, int] = field(default_factory=dict)
    generation: Dict[Any, int] = field(default_factory=dict)  # bumped when a partition is revoked
    rewind: Dict[Any, int] = field(default_factory=dict)  # revoked partition -> its lowest unsettled offset
    settled: Deque[Tuple[Any, int, int]] = field(default_factory=collections.deque)  # (tp, gen, offset)
    held: int = 0
    idle: threading.Event = field(default_factory=threading.Event)  # saw the pause: delivers no more
    leave: threading.Event = field(default_factory=threading.Event)  # release(): commit, leave the group
    left: threading.Event = field(default_factory=threading.Event)


def dead_letter_topic(edge: Edge) -> str:
    """Kafka has no dead-lettering: malformed inputs are written to this topic per edge."""
    return edge.dead_letter_queue


class KafkaSource:
    dead_letters_by_publish = True  # the runner publishes the raw message to dead_letter_topic

    def __init__(self, bootstrap: str, edges: Sequence[Edge], prefetch: int, client_id: str, poll_ms: int = 100,
                 create: bool = True):
        self.bootstrap = bootstrap
        self.edges = tuple(edges)
        self.prefetch = prefetch
        self.client_id = client_id
        self.poll_ms = poll_ms
        self.create = create  # create the input topics at start
        self._on_delivery: Optional[DeliveryCallback] = None
        self._states = [_EdgeState(e) for e in self.edges]
        self._lock = threading.Lock()
        self._paused = threading.Event()
        self._stopping = threading.Event()
        self._threads: List[threading.Thread] = []
        self._errors: List[str] = []

    def start(self, on_delivery: DeliveryCallback, timeout_s: Optional[float] = 60.0,
              cancel: Optional[threading.Event] = None) -> None:
        self._on_delivery = on_delivery
        if self.create:
            create_topics(self.bootstrap, sorted({e.topic for e in self.edges}),
                          timeout_s=KAFKA_START_S if timeout_s is None else timeout_s)
        ready = []
        for i, state in enumerate(self._states):
            ev = threading.Event()
            ready.append(ev)
            t = threading.Thread(target=self._poll_thread, args=(i, state, ev), name=f"kafka-source-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        # the consumers join their groups as the broker answers: on a loaded machine that can take
        # longer than any fixed wait, so without a deadline (None) until they are ready or stopped
        def what() -> str:
            return f"Kafka at {self.bootstrap}: consumers not ready ({'; '.join(self._errors) or 'no error reported'})"

        try:
            for ev in ready:
                wait_ready(ev, timeout_s, cancel, what)
        except TransportError:
            self._stopping.set()
            raise

    def failure(self) -> Optional[str]:
        """What ended a poll thread that should still run (the client gave up)."""
        if self._stopping.is_set() or all(t.is_alive() for t in self._threads):
            return None
        return "; ".join(self._errors) or "a consumer thread ended"

    def current(self, delivery: Delivery) -> bool:
        i, tp, gen, _offset = delivery.token
        return self._states[i].generation.get(tp, 0) == gen

    def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        i, tp, gen, offset = delivery.token
        if outcome is Outcome.REQUEUE:
            # Kafka cannot requeue one record: hand it to the runner again (same token, still held)
            self._on_delivery(delivery)  # type: ignore[misc]
            return
        if outcome is Outcome.RELEASE:
            return  # stays outstanding (uncommitted) until release() leaves the group
        with self._lock:
            self._states[i].settled.append((tp, gen, offset))

    def pause(self, timeout_s: float = 10.0) -> bool:
        """Stop fetching (staying in the groups, committing); True once no poll thread delivers."""
        for state in self._states:
            state.idle.clear()
        self._paused.set()
        return self._wait_all(lambda s: s.idle, timeout_s)

    def resume(self) -> None:
        self._paused.clear()  # the poll threads join their groups again

    def release(self, timeout_s: float = 10.0) -> bool:
        """Commit what is settled and leave the groups (a rebalance gives the partitions to the
        active members); True once every poll thread has left."""
        for state in self._states:
            state.left.clear()
            state.leave.set()
        return self._wait_all(lambda s: s.left, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        for t in self._threads:
            t.join(timeout_s)

    def _wait_all(self, event: Callable[[_EdgeState], threading.Event], timeout_s: float) -> bool:
        """Wait for each running poll thread's event (a thread that ended holds nothing)."""
        deadline = time.monotonic() + timeout_s
        for state, thread in zip(self._states, self._threads, strict=False):
            while thread.is_alive() and not event(state).wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    return False
        return True

    # -- poll threads ------------------------------------------------------------------------

    def _new_consumer(self, state: _EdgeState) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=state.edge.consumer_group, client_id=self.client_id,
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=self.prefetch)

    def _poll_thread(self, index: int, state: _EdgeState, ready: threading.Event) -> None:
        from kafka import AsyncConsumerRebalanceListener
        from kafka.errors import KafkaError

        source = self

        # kafka-python 3 runs the listener on its IO thread, where a blocking call (a synchronous
        # commit) is refused: the listener is a coroutine the client awaits, and awaits its commit
        class Listener(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
                source._apply_settled(state)
                await source._commit_in_rebalance(consumer, state)
                source._forget(state, revoked, rewind=True)  # records still held come again

            async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
                source._rewind(consumer, state, assigned)
                ready.set()

        try:
            consumer = self._new_consumer(state)
        except KafkaError as exc:
            self._errors.append(repr(exc))
            return
        subscribed = False
        if self._paused.is_set():
            ready.set()  # started switched off: joins no group until resumed
        try:
            while not self._stopping.is_set():
                self._apply_settled(state)
                committed = self._commit(consumer, state)
                if state.leave.is_set() and committed:  # a failed commit is retried before leaving
                    if subscribed:
                        self._leave(consumer, state)
                        subscribed = False
                    state.leave.clear()
                    state.left.set()
                if self._paused.is_set():
                    state.idle.set()
                room = self.prefetch - state.held
                if self._paused.is_set() or room <= 0:
                    time.sleep(0.005)  # the client's heartbeat thread keeps the membership
                    continue
                if not subscribed:
                    consumer.subscribe([state.edge.topic], listener=Listener())
                    subscribed = True
                self._deliver(index, state, consumer.poll(timeout_ms=self.poll_ms, max_records=room))
            self._apply_settled(state)
            self._commit(consumer, state)
        except Exception as exc:  # noqa: BLE001 - logged; held records come again after a restart
            log.error("kafka source (%s): %r", state.edge.consumer_group, exc)
            self._errors.append(repr(exc))
        finally:
            consumer.close()

    def _deliver(self, index: int, state: _EdgeState, batches: Mapping[Any, Sequence[Any]]) -> None:
        for tp, records in batches.items():
            gen = state.generation.get(tp, 0)
            for r in records:
                state.outstanding.setdefault(tp, []).append(r.offset)
                state.next_offset[tp] = r.offset + 1
                state.held += 1
                self._on_delivery(Delivery(  # type: ignore[misc]
                    body=r.value, edge=state.edge, token=(index, tp, gen, r.offset)))

    def _forget(self, state: _EdgeState, partitions: Iterable[Any], rewind: bool = False) -> None:
        """The partitions are no longer ours: what is held there is stale, uncommitted records
        come again to their next owner. With `rewind`, where each partition's unsettled records
        begin is kept for `_rewind`, in case the partition comes straight back to us."""
        for tp in partitions:
            held, nxt = state.outstanding.get(tp), state.next_offset.get(tp)
            if rewind and (held or nxt is not None):
                state.rewind[tp] = min(held) if held else nxt  # type: ignore[assignment]
            state.generation[tp] = state.generation.get(tp, 0) + 1
            state.held -= len(state.outstanding.pop(tp, []))
            state.next_offset.pop(tp, None)
            state.committed.pop(tp, None)

    def _rewind(self, consumer: Any, state: _EdgeState, assigned: Iterable[Any]) -> None:
        """A partition revoked and assigned back in the same rebalance keeps the client's fetch
        position, past the records it held then (now stale): fetch again from the first of them,
        else they would never be processed. Partitions new to us start at the group's commit."""
        for tp in assigned:
            if tp in state.rewind:
                consumer.seek(tp, state.rewind[tp])
        state.rewind.clear()

    def _leave(self, consumer: Any, state: _EdgeState) -> None:
        """Leave the group after the caller's commit (released records stay below it); kafka-python's
        unsubscribe does not call the rebalance listener, so the partitions are forgotten here."""
        self._forget(state, set(state.outstanding) | set(state.next_offset))
        state.rewind.clear()  # a later assignment starts at the group's commit, others may have moved on
        consumer.unsubscribe()

    def _apply_settled(self, state: _EdgeState) -> None:
        with self._lock:
            settled = list(state.settled)
            state.settled.clear()
        for tp, gen, offset in settled:
            if state.generation.get(tp, 0) != gen:
                continue
            held = state.outstanding.get(tp)
            if held and offset in held:
                held.remove(offset)
                state.held -= 1

    @staticmethod
    def _due_offsets(state: _EdgeState) -> Dict[Any, Any]:
        """Each partition's lowest outstanding offset, where it differs from the last commit."""
        from kafka.structs import OffsetAndMetadata

        offsets = {}
        for tp, nxt in state.next_offset.items():
            held = state.outstanding.get(tp)
            upto = min(held) if held else nxt  # everything below is settled
            if state.committed.get(tp) != upto:
                offsets[tp] = OffsetAndMetadata(upto, "", -1)
        return offsets

    def _commit(self, consumer: Any, state: _EdgeState) -> bool:
        """Commit each partition up to its lowest outstanding offset; False if the commit failed."""
        from kafka.errors import KafkaError

        offsets = self._due_offsets(state)
        if not offsets:
            return True
        try:
            consumer.commit(offsets)
        except KafkaError as exc:  # e.g. a rebalance under way: the next loop turn tries again
            log.warning("kafka source (%s): commit failed: %r", state.edge.consumer_group, exc)
            return False
        state.committed.update({tp: om.offset for tp, om in offsets.items()})
        return True

    async def _commit_in_rebalance(self, consumer: Any, state: _EdgeState) -> None:
        """`_commit` from the rebalance listener on the client's IO thread: the same offsets, the
        commit awaited instead of blocked on. A failed one leaves the last commit, from which the next
        owner starts (records processed since come again and are deduplicated downstream)."""
        from kafka.errors import KafkaError

        offsets = self._due_offsets(state)
        if not offsets:
            return
        try:
            await consumer.commit_async(offsets)
        except KafkaError as exc:
            log.warning("kafka source (%s): commit before the rebalance failed: %r", state.edge.consumer_group, exc)
            return
        state.committed.update({tp: om.offset for tp, om in offsets.items()})
