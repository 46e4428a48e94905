"""Publishing transports shared by the data provider and the operator runner.

* ``RabbitPublisher`` (pika): persistent messages to the producer's fanout exchange with
  **asynchronous publisher confirms**. A pika ``SelectConnection`` runs in its own I/O thread;
  ``publish_batch`` only queues (it never waits for the broker, so a slow or restarting broker
  does not disturb the emitter's schedule until ``max_unconfirmed`` messages are outstanding, then
  it applies back-pressure). Confirms (``multiple`` acks included) release messages; nacked
  messages are republished. When the connection drops (broker restart) it reconnects with
  exponential backoff and republishes every unconfirmed message, in order: delivery is at least
  once and every confirmed message is in its queues (durable queues, persistent messages).
* ``KafkaPublisher`` (kafka-python): one topic per producer, ``acks=all`` (idempotent producer),
  the machine id as key (per-machine order), the kafka client's own retries and reconnects.
* ``MemoryTransport``: keeps messages in a list and confirms at once (unit tests).

All count ``published`` (handed over), ``confirmed`` and more in ``stats``.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Protocol, Sequence

from operators import wiring as wiring_mod
from operators.rabbit_connection import ReconnectingConnection, safe_url
from operators.wiring import Wiring

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """The broker cannot be reached or refuses the setup; the message says which and where."""


class BrokerUnreachable(TransportError):
    """The broker did not answer within the time given (it may be restarting: trying again may help)."""


class StartCancelled(TransportError):
    """A start given up because its caller was asked to stop while it waited for the broker."""


WAIT_NOTE_S = 10.0  # while a start waits for the broker without a deadline, it says so this often


def wait_ready(ready: threading.Event, timeout_s: Optional[float], cancel: Optional[threading.Event],
               what: Callable[[], str]) -> None:
    """Wait for ``ready``: at most ``timeout_s``, or without a deadline (None) until ``cancel`` is set,
    as long as a running connection would reconnect. Raises BrokerUnreachable at the deadline and
    StartCancelled once ``cancel`` is set; ``what`` says what is awaited (for the messages)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    note = time.monotonic() + WAIT_NOTE_S
    while not ready.wait(0.2):
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            raise StartCancelled(f"stopped while waiting: {what()}")
        if deadline is not None and now >= deadline:
            raise BrokerUnreachable(f"{what()} within {timeout_s:.0f} s")
        if now >= note:
            note = now + WAIT_NOTE_S
            log.warning("still waiting: %s", what())


@dataclass(frozen=True)
class OutMessage:
    producer: str  # the source (or operator) publishing: selects exchange / topic
    item_id: str
    key: str  # partition key (Kafka); the machine id
    body: bytes
    properties: Dict[str, Any] = field(default_factory=dict)  # pika.BasicProperties kwargs
    # an explicit destination instead of the producer's exchange / topic: Kafka, a topic (the runner's
    # dead-letter topics); RabbitMQ, a queue reached through the default exchange (an instance's own
    # queue when the network is emulated, operators/netem.py)
    destination: Optional[str] = None
    # the caller's bookkeeping handle, handed back with the confirm (the runner: the input item)
    ref: Any = field(default=None, compare=False, repr=False)


@dataclass
class TransportStats:
    published: int = 0  # handed to the transport
    sent: int = 0  # written to the broker, republished ones included
    confirmed: int = 0
    republished: int = 0  # unconfirmed when a connection dropped, sent again
    nacked: int = 0
    failed: int = 0  # given up (Kafka: after the client's retries)
    reconnects: int = 0
    last_error: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


ConfirmCallback = Callable[[Sequence[OutMessage]], None]


class Transport(Protocol):
    stats: TransportStats

    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        """Connect: within ``timeout_s``, or (None) until it connects or ``cancel`` is set."""

    def publish_batch(self, messages: Sequence[OutMessage]) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every published message is confirmed; False on timeout."""

    def close(self, timeout_s: float = 30.0) -> None: ...


# ---- memory ----------------------------------------------------------------------------------

class MemoryTransport:
    def __init__(self, on_confirm: Optional[ConfirmCallback] = None):
        self.messages: List[OutMessage] = []
        self.stats = TransportStats()
        self.on_confirm = on_confirm

    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        pass

    def publish_batch(self, messages: Sequence[OutMessage]) -> None:
        self.messages.extend(messages)
        n = len(messages)
        self.stats.published += n
        self.stats.sent += n
        self.stats.confirmed += n
        if self.on_confirm is not None and messages:
            self.on_confirm(messages)

    def flush(self, timeout_s: float = 30.0) -> bool:
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        pass


# ---- RabbitMQ --------------------------------------------------------------------------------

def declare_wiring(url: str, wiring: Wiring, producers: Optional[Iterable[str]] = None,
                   timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
    """Declare the wiring through a short-lived blocking connection, retrying until ``timeout_s``
    (None: until it succeeds or ``cancel`` is set; 0: one attempt)."""
    _on_channel(url, wiring, lambda channel: wiring_mod.declare(channel, wiring, producers), timeout_s, cancel)


def declare_queues(url: str, wiring: Wiring, edges: Sequence[wiring_mod.Edge], timeout_s: Optional[float] = 30.0,
                   cancel: Optional[threading.Event] = None) -> None:
    """Declare per-instance queues (``wiring.instance_edges``) as ``declare_wiring`` declares a wiring."""
    _on_channel(url, wiring, lambda channel: wiring_mod.declare_instance_queues(channel, wiring, edges), timeout_s,
                cancel)


def _on_channel(url: str, wiring: Wiring, action: Callable[[Any], None], timeout_s: Optional[float],
                cancel: Optional[threading.Event] = None) -> None:
    import pika
    import pika.exceptions

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    note = time.monotonic()  # the first failure is said at once, then every WAIT_NOTE_S
    while True:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(url))
            try:
                action(conn.channel())
            finally:
                if conn.is_open:
                    conn.close()
            return
        except pika.exceptions.ChannelClosedByBroker as exc:  # e.g. PRECONDITION_FAILED: not retryable
            raise TransportError(f"RabbitMQ at {safe_url(url)} refused the wiring of {wiring.prefix!r}: {exc}") from exc
        except pika.exceptions.AMQPError as exc:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise BrokerUnreachable(
                    f"RabbitMQ at {safe_url(url)} not reachable within {timeout_s:.0f} s: {exc!r}") from exc
            if now >= note:
                note = now + WAIT_NOTE_S
                log.warning("RabbitMQ at %s not reachable (%r); trying again", safe_url(url), exc)
            if cancel is not None and cancel.wait(0.5):
                raise StartCancelled(f"stopped while waiting for RabbitMQ at {safe_url(url)}") from exc
            if cancel is None:
                time.sleep(0.5)


class RabbitPublisher(ReconnectingConnection):
    """Persistent messages with asynchronous publisher confirms, reconnecting after broker restarts."""

    CHUNK = 256  # messages written per I/O-loop turn (keeps confirms flowing under load)
    role = "rabbit publisher"

    def __init__(self, url: str, wiring: Wiring, producers: Optional[Iterable[str]] = None,
                 declare: bool = True, max_unconfirmed: int = 50_000,
                 on_confirm: Optional[ConfirmCallback] = None,
                 reconnect_initial_s: float = 0.2, reconnect_max_s: float = 5.0):
        self.url = url
        self.wiring = wiring
        self.producers = tuple(wiring.sources if producers is None else producers)
        self.declare = declare
        self.max_unconfirmed = int(max_unconfirmed)
        self.on_confirm = on_confirm
        self.reconnect_initial_s = reconnect_initial_s
        self.reconnect_max_s = reconnect_max_s
        self.stats = TransportStats()
        self._exchanges = {p: wiring.exchange(p) for p in self.producers}
        self._cond = threading.Condition()
        self._pending: Deque[OutMessage] = collections.deque()
        self._unconfirmed: Dict[int, OutMessage] = {}  # delivery tag -> message, ascending tags
        self._next_tag = 1
        self._conn: Any = None
        self._channel: Any = None
        self._drain_scheduled = False
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._attempts = 0
        self._opened_before = False  # a channel was ready before the current connection
        self._thread: Optional[threading.Thread] = None

    # -- caller side -------------------------------------------------------------------------

    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        """Connect (reconnecting as after a lost connection) until a confirm-mode channel is open:
        within ``timeout_s``, or (None) until then or until ``cancel`` is set."""
        if self.declare:
            declare_wiring(self.url, self.wiring, self.producers, timeout_s, cancel)
        self._thread = threading.Thread(target=self._serve_connections, name="rabbit-publisher", daemon=True)
        self._thread.start()
        try:
            wait_ready(self._ready, timeout_s, cancel, lambda: f"RabbitMQ at {safe_url(self.url)}: no confirm-mode "
                       f"channel ({self.stats.last_error or 'no error reported'})")
        except TransportError:
            self._stopping.set()
            raise

    def publish_batch(self, messages: Sequence[OutMessage]) -> None:
        if not messages:
            return
        for m in messages:
            if m.producer not in self._exchanges:
                raise TransportError(f"producer {m.producer!r} is not published by this transport "
                                     f"(producers: {', '.join(self.producers)})")
        with self._cond:
            # back-pressure: bounded memory while the broker is slow or away
            while (len(self._pending) + len(self._unconfirmed) + len(messages) > self.max_unconfirmed
                   and len(self._pending) + len(self._unconfirmed) > 0 and not self._stopping.is_set()):
                self._cond.wait(0.1)
            self._pending.extend(messages)
            self.stats.published += len(messages)
        self._wake()

    def outstanding(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._unconfirmed)

    def flush(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._unconfirmed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return
        self.flush(timeout_s)
        self._stopping.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.ioloop.add_callback_threadsafe(self._close_connection)
            except Exception:  # noqa: BLE001 - the loop is already gone: nothing to close
                pass
        self._thread.join(timeout_s)
        self._thread = None

    def _wake(self) -> None:
        conn = self._conn
        if conn is None:
            return  # (re)connecting: the channel's open callback drains
        with self._cond:
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            conn.ioloop.add_callback_threadsafe(self._drain)
        except Exception:  # noqa: BLE001 - loop closed between the check and the call: reconnect drains
            with self._cond:
                self._drain_scheduled = False

    # -- I/O thread --------------------------------------------------------------------------

    def _connecting(self) -> None:
        if self._attempts:
            self.stats.reconnects += 1
        self._attempts += 1
        self._opened_before = self._ready.is_set()

    def _failed(self, exc: BaseException) -> None:
        self.stats.last_error = repr(exc)

    def _open_failed(self, err: Any) -> None:
        self.stats.last_error = f"connect: {err!r}"

    def _closed(self, reason: Any) -> None:
        self.stats.last_error = f"closed: {reason!r}"

    def _lost(self, had_channel: bool) -> bool:
        self._requeue_unconfirmed()
        return had_channel or (not self._opened_before and self._ready.is_set())

    def _why(self) -> str:
        return f" ({self.stats.last_error})"

    def _stopped(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _on_channel_open(self, channel: Any) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                 callback=lambda _frame: self._on_confirm_mode(channel))

    def _on_confirm_mode(self, channel: Any) -> None:
        with self._cond:
            self._next_tag = 1  # delivery tags count per channel
            self._channel = channel
            self._drain_scheduled = False
        self._ready.set()
        self._drain()

    def _on_channel_closed(self, channel: Any, reason: Any) -> None:
        self._channel = None
        if not self._stopping.is_set():
            self.stats.last_error = f"channel closed: {reason!r}"
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()  # reconnect from scratch (unconfirmed messages are republished)

    def _drain(self) -> None:
        channel = self._channel
        with self._cond:
            self._drain_scheduled = False
            if channel is None or not channel.is_open:
                return
            chunk = [self._pending.popleft() for _ in range(min(self.CHUNK, len(self._pending)))]
            more = bool(self._pending)
            tag = self._next_tag
            self._next_tag += len(chunk)
            for i, m in enumerate(chunk):
                self._unconfirmed[tag + i] = m
        import pika

        for m in chunk:
            if m.destination is None:
                channel.basic_publish(exchange=self._exchanges[m.producer], routing_key="", body=m.body,
                                      properties=pika.BasicProperties(**m.properties))
            else:  # one queue, through the default exchange (an instance's own queue: emulated network)
                channel.basic_publish(exchange="", routing_key=m.destination, body=m.body,
                                      properties=pika.BasicProperties(**m.properties))
        self.stats.sent += len(chunk)
        if more and self._conn is not None:
            with self._cond:
                self._drain_scheduled = True
            self._conn.ioloop.call_later(0, self._drain)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag, multiple = method.delivery_tag, method.multiple
        ack = method.NAME == "Basic.Ack"
        done: List[OutMessage] = []
        with self._cond:
            if multiple:
                while self._unconfirmed:
                    first = next(iter(self._unconfirmed))
                    if first > tag:
                        break
                    done.append(self._unconfirmed.pop(first))
            else:
                m = self._unconfirmed.pop(tag, None)
                if m is not None:
                    done.append(m)
            if ack:
                self.stats.confirmed += len(done)
            else:
                self.stats.nacked += len(done)
                self._pending.extendleft(reversed(done))
            self._cond.notify_all()
        if not ack:
            self._drain()
        elif self.on_confirm is not None and done:
            self.on_confirm(done)

    def _requeue_unconfirmed(self) -> None:
        with self._cond:
            if self._unconfirmed:
                lost = list(self._unconfirmed.values())  # ascending tags = publish order
                self._unconfirmed.clear()
                self._pending.extendleft(reversed(lost))
                self.stats.republished += len(lost)
            self._drain_scheduled = False
            self._cond.notify_all()


# ---- Kafka -----------------------------------------------------------------------------------

# the bound of a Kafka start asked to wait without one: the client retries and reconnects by itself
# once started, but its start-up calls need a finite time
KAFKA_START_S = 60.0


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int = 1, timeout_s: float = 30.0) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="testbed-provider-admin",
                                     request_timeout_ms=int(timeout_s * 1000))
            break
        except KafkaError as exc:
            if time.monotonic() >= deadline:
                raise TransportError(f"Kafka at {bootstrap} not reachable within {timeout_s:.0f} s: {exc!r}") from exc
            time.sleep(0.5)
    try:
        existing = set(admin.list_topics())
        wanted = [NewTopic(name=t, num_partitions=partitions, replication_factor=1)
                  for t in topics if t not in existing]
        if wanted:
            try:
                admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


class KafkaPublisher:
    """One topic per producer, acks=all; confirmations through the send futures."""

    def __init__(self, bootstrap: str, wiring: Wiring, producers: Optional[Iterable[str]] = None,
                 create: bool = True, partitions: int = 1, linger_ms: int = 5,
                 on_confirm: Optional[ConfirmCallback] = None, client_id: str = "testbed-provider",
                 extra_topics: Sequence[str] = (),
                 on_error: Optional[Callable[[OutMessage, BaseException], None]] = None):
        self.bootstrap = bootstrap
        self.wiring = wiring
        self.producers = tuple(wiring.sources if producers is None else producers)
        self.create = create
        self.partitions = partitions
        self.linger_ms = linger_ms
        self.on_confirm = on_confirm
        self.client_id = client_id
        self.on_error = on_error  # a send given up after the client's retries (the runner resends)
        self.extra_topics = tuple(extra_topics)  # explicit destinations this publisher may write to
        self.stats = TransportStats()
        self._topics = {p: wiring.topic(p) for p in self.producers}
        self._producer: Any = None
        self._lock = threading.Lock()

    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        timeout_s = KAFKA_START_S if timeout_s is None else timeout_s

        if self.create:
            create_topics(self.bootstrap, list(self._topics.values()) + list(self.extra_topics), self.partitions,
                          timeout_s)
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", linger_ms=self.linger_ms,
                client_id=self.client_id, max_block_ms=int(timeout_s * 1000),
            )
        except KafkaError as exc:
            raise TransportError(f"Kafka at {self.bootstrap}: {exc!r}") from exc

    def publish_batch(self, messages: Sequence[OutMessage]) -> None:
        if self._producer is None:
            raise TransportError("KafkaPublisher.publish_batch before start()")
        for m in messages:
            topic = m.destination if m.destination in self.extra_topics else self._topics.get(m.producer)
            if topic is None:
                raise TransportError(f"producer {m.producer!r} is not published by this transport")
            headers = [("item_id", m.item_id.encode())]
            sent_ms = (m.properties.get("headers") or {}).get("sent_ms")
            if sent_ms is not None:
                headers.append(("sent_ms", str(sent_ms).encode()))
            future = self._producer.send(topic, value=m.body, key=m.key.encode(), headers=headers)
            future.add_callback(self._on_success, m)
            future.add_errback(self._on_error, m)
        with self._lock:
            self.stats.published += len(messages)
            self.stats.sent += len(messages)

    def _on_success(self, message: OutMessage, _metadata: Any) -> None:
        with self._lock:
            self.stats.confirmed += 1
        if self.on_confirm is not None:
            self.on_confirm([message])

    def _on_error(self, message: OutMessage, exc: BaseException) -> None:
        with self._lock:
            self.stats.failed += 1
            self.stats.last_error = repr(exc)
        if self.on_error is not None:
            self.on_error(message, exc)

    def flush(self, timeout_s: float = 30.0) -> bool:
        if self._producer is None:
            return True
        from kafka.errors import KafkaTimeoutError

        try:
            self._producer.flush(timeout=timeout_s)
        except KafkaTimeoutError:
            return False
        with self._lock:
            return self.stats.confirmed + self.stats.failed >= self.stats.published

    def close(self, timeout_s: float = 30.0) -> None:
        if self._producer is not None:
            self.flush(timeout_s)
            self._producer.close(timeout=timeout_s)
            self._producer = None
