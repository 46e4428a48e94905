"""The shared runner of an operator instance: ``python -m operators.runner`` (config: environment
variables, see ``operators/runner_config.py``).

Per input: decode the envelope, process it with the operator (optionally after emulated work),
publish the emissions to the operator type's own exchange/topic (persistent, publisher confirms,
asynchronous), and acknowledge (RabbitMQ) or commit (Kafka) the input only when every emission is
confirmed. Delivery is therefore at least once; a finished input's id is remembered in Redis for
``DEDUP_TTL_S`` (after its emissions are confirmed, before its ack), so an input that comes again
(redelivered after a crash, or republished upstream after a broker restart) is acknowledged
without being processed or emitted a second time. One that comes again while its first delivery
still waits for its emissions' confirms (the broker hands back what a lost connection held: with the
emulated network's own queues, to the same instance) is settled with that first one instead of
being processed again.

Threads: the source's I/O thread(s) hand deliveries to ``PARALLEL`` worker threads; the
publisher's I/O thread reports confirms; a completer thread records finished ids in Redis (one
pipeline per batch) and settles the inputs; a flusher writes the metrics every second; a watcher
polls the pool activation flag (``operators/api.py``).

Pool activation: switched off, the instance pauses its source, hands back what it holds but has
not started (those waiting for a worker and the rest of a worker's batch), finishes what is in
process, has the source make sure the broker holds nothing for it, and reports ``inactive``; a
switch-off always completes before a switch-on is taken up.

Busy time: a worker slot is busy from taking a batch of deliveries until it waits for the next one
(decoding, duplicate check, ``WORK_MS``, the operator, handing emissions to the publisher; not the
asynchronous confirms). CPU time: the worker threads' own CPU clocks and the processes they ran
(tesseract), without the wait for a CPU that busy time includes (``operators/metrics.py``). Run-queue
delay: that wait, of the same threads and processes inside busy periods (``operators/schedstat.py``).

Item timeout (``ITEM_TIMEOUT_S`` > 0): an input whose origin (``origin_ms``, the source's emission
of what it derives from) is older than that when a worker takes it is dropped: acknowledged without
being processed or emitting anything, and counted (hash ``<prefix>:timeout``, in one Lua script with
its finished id, so a redelivery is not counted again; the ``count`` entries' ``timeout``). If Redis
cannot count it, it is processed instead (nothing goes unaccounted for).

Emulated network (``EMULATION_HOST`` set; operators/netem.py): the instance consumes its own
queues, and its publisher is an ``EmulatedSender`` that picks the receiving instances and publishes
after the drawn inter-host delays. An input it takes is lost with probability 1 - A of its host:
acknowledged unprocessed and counted (hash ``<prefix>:unavailable``, with its finished id in one Lua
script as for the item timeout; the ``<prefix>:netem`` stream per interval).

Start: the instance waits for a broker that is away (a replacement started during a broker
restart) without a deadline, as a running one reconnects, until it is stopped; a stop then ends it
with status 0, holding nothing.

Malformed inputs and ``PoisonItem``s are dead-lettered (RabbitMQ: the queue's dead-letter queue;
Kafka: the edge's ``.dead`` topic) and counted. On SIGTERM (or SIGINT) the instance cancels its
consumers, finishes and acknowledges what it holds, flushes its metrics and exits 0.
"""
from __future__ import annotations

import signal
import sys

# A stop can come while the instance is still starting (a scale-down or the end of a run right
# after a start). The image starts the interpreter with SIGTERM ignored (operators/Dockerfile) and
# the host pool repeats its SIGTERM; from here until the draining handler is installed a stop simply
# ends the instance with status 0: it holds nothing yet.
# Once a stop is taken, further SIGTERMs (the host pool repeats its own) are ignored: Python resets a
# signal with a Python handler to its default action while it shuts down, and one arriving then
# would end the instance with 143 after a clean drain.


def _stop_now(*_: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(0)


signal.signal(signal.SIGTERM, _stop_now)

import functools  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import queue  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple  # noqa: E402

from operators.activation import ActivationStore, RedisActivation
from operators.api import (
    INACTIVE,
    STOPPED,
    Emission,
    Operator,
    OperatorContext,
    PoisonItem,
    emitted_hash,
    processed_hash,
    seen_key,
    timeout_hash,
)
from operators.envelope import Envelope, EnvelopeError, amqp_properties
from operators.metrics import Metrics
from operators.netem import COUNT_ONCE_LUA, EmulatedSender, unavailable_hash
from operators.runner_config import ConfigError, RunnerConfig, config_from_env
from operators.sources import Delivery, KafkaSource, Outcome, RabbitSource, dead_letter_topic
from operators.transports import (
    KafkaPublisher,
    OutMessage,
    RabbitPublisher,
    StartCancelled,
    declare_queues,
    declare_wiring,
)
from operators.wiring import instance_edges

log = logging.getLogger("operators.runner")

BATCH = 32  # deliveries a worker takes at once (one Redis round trip for their duplicate check)
# KEYS: the finished inputs' seen keys; ARGV: TTL, processed hash, emitted hash, operator, then each
# input's emissions. Marks each id finished unless it is already, and counts only the new ones.
REMEMBER_LUA = """
local processed, emitted = 0, 0
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, '1', 'NX', 'EX', tonumber(ARGV[1])) then
    processed = processed + 1
    emitted = emitted + tonumber(ARGV[4 + i])
  end
end
if processed > 0 then redis.call('HINCRBY', ARGV[2], ARGV[4], processed) end
if emitted > 0 then redis.call('HINCRBY', ARGV[3], ARGV[4], emitted) end
return {processed, emitted}
"""
# a timed-out or lost input: marked finished unless it is already, and counted only then
TIMEOUT_LUA = COUNT_ONCE_LUA
STATS_LOG_S = 60.0


@dataclass(eq=False)
class _Pending:
    """An input waiting for its emissions' confirms."""

    delivery: Delivery
    input_id: Optional[str]  # None: a dead letter being written (Kafka)
    remaining: int
    emissions: int = 0
    # the same input delivered again meanwhile (a redelivery after a lost connection): settled with it
    again: List[Delivery] = field(default_factory=list)


@dataclass
class RunnerStats:
    received: int = 0
    processed: int = 0  # emissions confirmed, input settled
    emitted: int = 0
    dead: int = 0
    duplicates: int = 0  # inputs seen finished before: acknowledged without processing
    released: int = 0  # handed back unstarted when switched off
    stale: int = 0  # deliveries of a lost connection / revoked partition, left to the broker
    errors: int = 0  # operator failures other than PoisonItem (input requeued)
    timed_out: int = 0  # older than ITEM_TIMEOUT_S when taken: acknowledged unprocessed
    unavailable: int = 0  # lost to the emulated host's unavailability: acknowledged unprocessed


class Runner:
    def __init__(self, config: RunnerConfig, operator: Operator, source: Any, publisher: Any, redis: Any,
                 metrics: Optional[Metrics] = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, activation: Optional[ActivationStore] = None):
        self.config = config
        self.operator = operator
        self.source = source
        self.publisher = publisher
        self.redis = redis
        self.clock = clock
        self.sleep = sleep
        self.metrics = metrics or Metrics(config.prefix, config.operator, config.instance, config.sample_every,
                                          config.measurement, clock, sampling=config.sampling)
        self.stats = RunnerStats()
        self.activation = activation or RedisActivation(redis, config.prefix, config.instance, clock)
        self.netem = publisher if isinstance(publisher, EmulatedSender) else None  # the emulated network
        self._work: "queue.Queue[Optional[Delivery]]" = queue.Queue()
        # per worker slot: decoded deliveries of its batch not started yet (a switch-off takes them)
        self._unstarted: List[Deque[Tuple[Delivery, Envelope]]] = [deque() for _ in range(config.parallel)]
        self._paused = threading.Event()  # switched off: nothing is started, what comes is handed back
        self._inactive_reported = False  # (watcher thread only)
        self._watcher: Optional[threading.Thread] = None
        self._remember_script: Any = None  # REMEMBER_LUA, registered on first use
        self._timeout_script: Any = None  # TIMEOUT_LUA, registered on first use
        self._done: "queue.Queue[Optional[_Pending]]" = queue.Queue()
        # inputs whose emissions wait for their confirms, by (producer, item id): a redelivery of one
        # (the broker hands back what a lost connection held) waits for it instead of being processed
        # again, which would emit and draw its losses a second time
        self._waiting: Dict[Tuple[str, str], _Pending] = {}
        self._held = 0  # deliveries accepted and not yet settled (or dropped as stale)
        self._held_cond = threading.Condition()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher_stop = threading.Event()  # metrics keep flowing while draining
        self._threads: List[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    def start(self, timeout_s: Optional[float] = 60.0) -> None:
        """Connect the publisher, then the source: each within ``timeout_s``, or (None) until it
        connects or the instance is asked to stop (``StartCancelled``), as a running instance
        reconnects for as long as the broker is away. The threads run first, so that ``drain``
        can end a start that was stopped."""
        for i in range(self.config.parallel):
            self._spawn(functools.partial(self._worker, i), f"worker-{i}")
        self._spawn(self._completer, "completer")
        self._flusher = self._spawn(self._flush_loop, "metrics")
        self.publisher.on_confirm = self._on_confirm
        self.publisher.start(timeout_s, self._stop)
        if self.config.activation_poll_s and not self._claim_active_at_start():
            self._paused.set()
            self.source.pause()  # before start: the source joins/consumes nothing
        self.source.start(self._accept, timeout_s, self._stop)
        if self.config.activation_poll_s:
            self._watcher = self._spawn(self._watch_activation, "activation")
        log.info("%s %s (prefetch %d, parallel %d, %s)", "inactive on" if self._paused.is_set() else "consuming",
                 ", ".join(e.queue for e in self.source.edges), self.config.prefetch, self.config.parallel,
                 self.config.transport)

    def run(self, timeout_s: Optional[float] = 60.0) -> int:
        """Start, run until ``request_stop`` (SIGTERM), drain, close. Exit status 0 (also when stopped
        while it waited for the broker: it holds nothing), or 1 when the source failed for good (the
        container is restarted; held inputs come again)."""
        try:
            self.start(timeout_s)
        except StartCancelled as exc:
            log.info("%s", exc)
            self.drain()
            return 0
        failure = None
        while not self._stop.wait(1.0):
            failure = self.source.failure()
            if failure:
                log.error("input source failed: %s", failure)
                break
        self.drain()
        return 1 if failure else 0

    def drain(self) -> None:
        log.info("stopping: cancelling consumers, finishing %d held input(s)", self.held())
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(self.config.drain_timeout_s)  # no switch on or off from here on
        self.source.pause()
        # what it has not started goes back to the broker at once, so the drain lasts as long as the
        # items in process, not a prefetch's worth of work (which a loaded machine stretches)
        self._hand_back(self._take_unstarted())
        deadline = time.monotonic() + self.config.drain_timeout_s
        with self._held_cond:
            while self._held > 0 and time.monotonic() < deadline:
                self._held_cond.wait(0.1)
            left = self._held
        if left:
            log.warning("drain timeout: %d input(s) left unacknowledged (the broker redelivers them)", left)
        for _ in range(self.config.parallel):
            self._work.put(None)
        self.publisher.close(10.0)
        self._done.put(None)
        for t in self._threads:
            if t is not self._flusher:
                t.join(10.0)
        self._flusher_stop.set()
        self._flusher.join(10.0)
        self.metrics.flush(self.redis)
        self.source.close()
        self.operator.close()
        if self._watcher is not None:
            try:
                self.activation.report(STOPPED)
            except Exception as exc:  # noqa: BLE001 - only the report is missing
                log.warning("could not report %s: %r", STOPPED, exc)
        log.info("stopped: %s", self.stats)

    def held(self) -> int:
        with self._held_cond:
            return self._held

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    # -- deliveries --------------------------------------------------------------------------

    def _accept(self, delivery: Delivery) -> None:
        with self._held_cond:
            self._held += 1
        with self._lock:
            self.stats.received += 1
        if self._paused.is_set():
            self._hand_back([delivery])  # came while the source was pausing
        else:
            self._work.put(delivery)

    def _release(self, n: int = 1) -> None:
        with self._held_cond:
            self._held -= n
            if self._held <= 0:
                self._held_cond.notify_all()

    def _settle(self, delivery: Delivery, outcome: Outcome) -> None:
        self.source.settle(delivery, outcome)
        self._release()

    def _next_batch(self) -> Optional[List[Delivery]]:
        first = self._work.get()
        if first is None:
            return None
        batch = [first]
        # with several workers take only a share of what waits, so the others get items too
        limit = BATCH if self.config.parallel == 1 else 1 + self._work.qsize() // self.config.parallel
        while len(batch) < min(limit, BATCH):
            try:
                d = self._work.get_nowait()
            except queue.Empty:
                break
            if d is None:
                self._work.put(None)  # another worker's stop signal: leave it
                break
            batch.append(d)
        return batch

    def _worker(self, slot: int) -> None:
        self.metrics.cpu.register(slot)
        self.metrics.delay.register(slot)
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                self.metrics.busy.start(slot)
                self.metrics.delay.start(slot)
                try:
                    self._handle(batch, slot)
                finally:
                    self.metrics.delay.stop(slot)
                    self.metrics.busy.stop(slot)
        finally:
            self.metrics.delay.unregister(slot)
            self.metrics.cpu.unregister(slot)

    def _handle(self, batch: List[Delivery], slot: int) -> None:
        decoded = []
        for d in batch:
            if not self.source.current(d):
                self._stale()
                continue
            try:
                decoded.append((d, Envelope.decode(d.body)))
            except EnvelopeError as exc:
                log.warning("malformed input on %s dead-lettered: %s", d.edge.queue, exc)
                self._dead(d)
        seen = self._seen(decoded)
        fresh = []
        for (d, env), done_before in zip(decoded, seen, strict=True):
            if done_before:
                with self._lock:
                    self.stats.duplicates += 1
                self._settle(d, Outcome.ACK)
            elif not self._join_waiting(d, env):
                fresh.append((d, env))
        unstarted = self._unstarted[slot]
        with self._lock:  # under the lock a switch-off takes the batch from (see _take_unstarted)
            paused = self._paused.is_set()
            if not paused:
                unstarted.extend(fresh)
        if paused:
            self._hand_back([d for d, _env in fresh])
        while True:
            with self._lock:  # a switch-off may take the rest of the batch meanwhile
                if not unstarted:
                    return
                d, env = unstarted.popleft()
            self._process(d, env)

    def _join_waiting(self, d: Delivery, env: Envelope) -> bool:
        """True if the same input is already processed and waits for its confirms: this delivery
        is then settled with it (acknowledged unprocessed, a duplicate)."""
        with self._lock:
            first = self._waiting.get((d.edge.producer, env.item_id))
            if first is None:
                return False
            first.again.append(d)
            self.stats.duplicates += 1
            return True

    def _hand_back(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            self._settle(d, Outcome.RELEASE)
        if deliveries:
            with self._lock:
                self.stats.released += len(deliveries)

    def _stale(self) -> None:
        with self._lock:
            self.stats.stale += 1
        self._release()

    def _seen(self, decoded: Sequence[tuple]) -> List[bool]:
        if not self.config.dedup_ttl_s or not decoded:
            return [False] * len(decoded)
        try:
            pipe = self.redis.pipeline(transaction=False)
            for d, env in decoded:
                pipe.exists(seen_key(self.config.prefix, self.config.operator, d.edge.producer, env.item_id))
            return [bool(x) for x in pipe.execute()]
        except Exception as exc:  # noqa: BLE001 - Redis away: process (at least once) rather than stall
            log.warning("duplicate check failed, processing anyway: %r", exc)
            return [False] * len(decoded)

    def _process(self, d: Delivery, env: Envelope) -> None:
        if self.config.item_timeout_s and self._expired(env) and self._time_out(d, env):
            return
        if self.netem is not None and self.netem.host_lost() and self._lose(d, env):
            return
        if self.config.work_ms:
            self.sleep(self.config.work_ms / 1000.0)  # emulated service cost (configuration)
        try:
            emissions = list(self.operator.process(env))
        except PoisonItem as exc:
            log.warning("poison item %s on %s dead-lettered: %s", env.item_id, d.edge.queue, exc)
            self._dead(d)
            return
        except Exception:  # noqa: BLE001 - a transient failure (e.g. Redis): try the item again later
            log.exception("operator failed on %s; requeueing it", env.item_id)
            with self._lock:
                self.stats.errors += 1
            self.sleep(0.5)  # no hot loop on a failing dependency
            self._settle(d, Outcome.REQUEUE)
            return
        pending = _Pending(d, env.item_id, len(emissions), len(emissions))
        if emissions:
            with self._lock:
                self._waiting[(d.edge.producer, env.item_id)] = pending
            now = self.metrics.now_ms()
            self.publisher.publish_batch([self._message(e, env, now, pending) for e in emissions])
        self.metrics.completed(env.sent_ms, d.amqp_timestamp_s, self.metrics.now_ms(), env.origin_ms)
        if not emissions:
            self._done.put(pending)

    def _expired(self, env: Envelope) -> bool:
        return self.metrics.now_ms() - env.origin_ms > self.config.item_timeout_s * 1000.0

    def _time_out(self, d: Delivery, env: Envelope) -> bool:
        """Drop an input older than the item timeout: count it once, then acknowledge it. False (the
        caller processes it) when Redis cannot count it."""
        new = self._count_drop(d, env, timeout_hash(self.config.prefix), "timed-out")
        if new is None:
            return False
        if new:
            self.metrics.timed_out()
        self._settle_drop(d, new, "timed_out")
        return True

    def _lose(self, d: Delivery, env: Envelope) -> bool:
        """Drop an input lost to its host's unavailability: count it once, then acknowledge it.
        False (the caller processes it) when Redis cannot count it."""
        new = self._count_drop(d, env, unavailable_hash(self.config.prefix), "lost")
        if new is None:
            return False
        if new and self.netem is not None:
            self.netem.counters.lost(self.config.operator, counted=True)
        self._settle_drop(d, new, "unavailable")
        return True

    def _count_drop(self, d: Delivery, env: Envelope, counter: str, what: str) -> Optional[bool]:
        """Count a dropped input in the Redis hash `counter` unless a copy of it was counted before:
        True if this is its first count, False for a redelivered copy, None if Redis cannot count it."""
        try:
            if self._timeout_script is None:
                self._timeout_script = self.redis.register_script(TIMEOUT_LUA)
            keys = ([seen_key(self.config.prefix, self.config.operator, d.edge.producer, env.item_id)]
                    if self.config.dedup_ttl_s else [])
            return bool(int(self._timeout_script(keys=keys, args=[self.config.dedup_ttl_s, counter,
                                                                   self.config.operator])))
        except Exception as exc:  # noqa: BLE001 - uncounted it would be lost to the accounting
            log.warning("could not count %s input %s, processing it: %r", what, env.item_id, exc)
            return None

    def _settle_drop(self, d: Delivery, new: bool, stat: str) -> None:
        with self._lock:
            if new:
                setattr(self.stats, stat, getattr(self.stats, stat) + 1)
            else:
                self.stats.duplicates += 1
        self._settle(d, Outcome.ACK)

    def _message(self, emission: Emission, source: Envelope, sent_ms: int, pending: _Pending) -> OutMessage:
        out = emission.envelope(source, sent_ms)
        return OutMessage(producer=self.config.operator, item_id=out.item_id, key=out.machine_id, body=out.encode(),
                          properties=amqp_properties(out), ref=pending)

    def _dead(self, d: Delivery) -> None:
        if self.source.dead_letters_by_publish:  # Kafka: write it to the edge's dead-letter topic first
            pending = _Pending(d, None, 1)
            self.publisher.publish_batch([OutMessage(
                producer=self.config.operator, item_id="", key="", body=d.body,
                destination=dead_letter_topic(d.edge), ref=pending)])
        else:
            self._count_dead()
            self._settle(d, Outcome.DEAD)

    def _count_dead(self) -> None:
        self.metrics.dead()
        with self._lock:
            self.stats.dead += 1

    # -- confirms and completion -------------------------------------------------------------

    def _on_confirm(self, messages: Sequence[OutMessage]) -> None:
        finished = []
        with self._lock:
            for m in messages:
                p = m.ref
                if p is None:
                    continue
                p.remaining -= 1
                if p.input_id is not None:
                    self.stats.emitted += 1
                if p.remaining == 0:
                    finished.append(p)
        for p in finished:
            self._done.put(p)

    def _completer(self) -> None:
        stopping = False
        while not stopping:
            first = self._done.get()
            if first is None:
                return
            batch = [first]
            while True:
                try:
                    p = self._done.get_nowait()
                except queue.Empty:
                    break
                if p is None:
                    stopping = True
                    break
                batch.append(p)
            self._remember([p for p in batch if p.input_id is not None])
            for p in batch:
                if p.input_id is None:
                    self._count_dead()
                else:
                    self.metrics.processed(1, p.emissions)
                    with self._lock:
                        self.stats.processed += 1
                self._settle(p.delivery, Outcome.ACK)
                for again in self._done_waiting(p):
                    self._settle(again, Outcome.ACK)

    def _done_waiting(self, p: _Pending) -> List[Delivery]:
        """After its finish is recorded: no longer waiting; the deliveries of it that came meanwhile."""
        with self._lock:
            if p.input_id is not None and self._waiting.get((p.delivery.edge.producer, p.input_id)) is p:
                del self._waiting[(p.delivery.edge.producer, p.input_id)]
            again, p.again = p.again, []
        return again

    def _remember(self, finished: Sequence[_Pending]) -> None:
        """Record the finished inputs' ids and the cumulative counters atomically, before the acks:
        after a crash, a redelivered input is recognised and counted nowhere twice. An input that
        was processed twice before either finish was recorded (its ack lost in a broker restart,
        redelivered while the first processing waited for its confirms) is counted once: only the
        ids recorded here for the first time count."""
        if not finished:
            return
        processed, emitted = len(finished), sum(p.emissions for p in finished)
        try:
            if self.config.dedup_ttl_s:
                if self._remember_script is None:
                    self._remember_script = self.redis.register_script(REMEMBER_LUA)
                keys = [seen_key(self.config.prefix, self.config.operator, p.delivery.edge.producer, p.input_id or "")
                        for p in finished]
                new, new_emitted = self._remember_script(keys=keys, args=[
                    self.config.dedup_ttl_s, processed_hash(self.config.prefix), emitted_hash(self.config.prefix),
                    self.config.operator, *(p.emissions for p in finished)])
                if int(new) < processed:
                    with self._lock:
                        self.stats.duplicates += processed - int(new)
                    log.info("%d input(s) finished twice (redelivered while in process); counted once",
                             processed - int(new))
                return
            pipe = self.redis.pipeline(transaction=True)
            self.metrics.cumulative(pipe, processed, emitted)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - only duplicate suppression is lost, never an item
            log.warning("could not record finished inputs: %r", exc)
            self.metrics.defer_cumulative(processed, emitted)

    # -- pool activation (watcher thread) ---------------------------------------------------

    def _claim_active_at_start(self) -> bool:
        try:
            return self.activation.claim_active()
        except Exception as exc:  # noqa: BLE001 - no flag readable: active, as without pool activation
            log.warning("activation flag not readable at start, starting active: %r", exc)
            return True

    def _watch_activation(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self._activation_step()
                failing = False
            except Exception as exc:  # noqa: BLE001 - Redis away: keep the current state, try again
                if not failing:
                    log.warning("pool activation: %r (retrying every %.1f s)", exc, self.config.activation_poll_s)
                failing = True
            if self._paused.is_set() and not self._inactive_reported and self.held() > 0:
                self._wait_held_zero(self.config.activation_poll_s)  # report as soon as it holds nothing
            else:
                self._stop.wait(self.config.activation_poll_s)

    def _activation_step(self) -> None:
        if not self._paused.is_set():
            if not self.activation.wanted():
                self._switch_off()
        elif self._inactive_reported and self.activation.claim_active():
            self._switch_on()
        if self._paused.is_set() and not self._inactive_reported:
            self._report_inactive_when_empty()

    def _switch_off(self) -> None:
        self._paused.set()
        self._inactive_reported = False
        self.source.pause()
        handed_back = self._take_unstarted()
        self._hand_back(handed_back)
        log.info("switched off: %d unstarted input(s) handed back, finishing %d", len(handed_back), self.held())

    def _take_unstarted(self) -> List[Delivery]:
        """Everything waiting for a worker or in the rest of a worker's batch."""
        taken: List[Delivery] = []
        stop_signals = 0
        while True:
            try:
                d = self._work.get_nowait()
            except queue.Empty:
                break
            if d is None:
                stop_signals += 1
            else:
                taken.append(d)
        for _ in range(stop_signals):
            self._work.put(None)
        with self._lock:
            for unstarted in self._unstarted:
                taken.extend(d for d, _env in unstarted)
                unstarted.clear()
        return taken

    def _report_inactive_when_empty(self) -> None:
        if self.held() > 0:
            return
        if not self.source.release():
            log.warning("switched off: the broker has not confirmed the settlements yet; trying again")
            return
        self.activation.report(INACTIVE)  # a failure: the next step reports
        self._inactive_reported = True
        log.info("inactive: holding nothing")

    def _switch_on(self) -> None:
        self._paused.clear()
        self.source.resume()
        log.info("switched on: consuming again")

    def _wait_held_zero(self, timeout_s: float) -> None:
        with self._held_cond:
            self._held_cond.wait_for(lambda: self._held <= 0, timeout_s)

    def _flush_loop(self) -> None:
        last_log = time.monotonic()
        while not self._flusher_stop.wait(self.config.metrics_flush_s):
            self.metrics.flush(self.redis)
            if time.monotonic() - last_log >= STATS_LOG_S:  # a sign of life in the container's log
                last_log = time.monotonic()
                log.info("%s, held %d", self.stats, self.held())


# ---- assembly and entry point ----------------------------------------------------------------

def load_factory(spec: str) -> Callable[[str, OperatorContext], Operator]:
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("OPERATOR_FACTORY", f"cannot load {spec!r}: {exc}") from exc


def build_runner(config: RunnerConfig, operator: Operator, redis: Any, clock: Callable[[], float] = time.time,
                 timeout_s: Optional[float] = 60.0) -> Runner:
    """The runner of ``config``, its queues declared (RabbitMQ) within ``timeout_s`` (None: until
    the broker answers; a SIGTERM meanwhile ends the process, which holds nothing yet)."""
    wiring = config.wiring()
    edges = wiring.inputs(config.operator)
    if config.emulation_host:  # the emulated network: own queues, the sender picks the receivers
        edges = instance_edges(wiring, config.operator, config.instance)
        declare_queues(config.amqp_url, wiring, edges, timeout_s)
        source: Any = RabbitSource(config.amqp_url, edges, config.prefetch, name=f"{config.instance} source")
        publisher: Any = EmulatedSender(RabbitPublisher(config.amqp_url, wiring, (config.operator,), declare=False),
                                        wiring, config.emulation_host, redis, config.emulation_seed, config.instance,
                                        dedup_ttl_s=config.dedup_ttl_s)
    elif config.transport == "rabbitmq":
        declare_wiring(config.amqp_url, wiring, sorted({e.producer for e in edges}) + [config.operator], timeout_s)
        source = RabbitSource(config.amqp_url, edges, config.prefetch, name=f"{config.instance} source")
        publisher = RabbitPublisher(config.amqp_url, wiring, (config.operator,), declare=False)
    else:
        source = KafkaSource(config.kafka_bootstrap, edges, config.prefetch, config.instance)
        publisher = KafkaPublisher(config.kafka_bootstrap, wiring, (config.operator,), create=True,
                                   client_id=config.instance, extra_topics=[dead_letter_topic(e) for e in edges])
        publisher.on_error = lambda m, exc: _resend_later(publisher, m, exc)
    return Runner(config, operator, source, publisher, redis, clock=clock)


def _resend_later(publisher: Any, message: OutMessage, exc: BaseException) -> None:
    """A Kafka send given up after the client's retries: send it again (its input stays held)."""
    log.warning("kafka send of %s failed (%r); resending in 1 s", message.item_id or "a dead letter", exc)
    timer = threading.Timer(1.0, publisher.publish_batch, args=([message],))
    timer.daemon = True
    timer.start()


def main() -> int:
    try:
        config = config_from_env()
        factory = load_factory(config.factory)
    except ConfigError as exc:
        print(f"operators.runner: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format=f"%(asctime)s {config.instance} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)  # pika logs every connection step at INFO
    logging.getLogger("kafka").setLevel(logging.WARNING)
    import redis as redis_lib

    client = redis_lib.Redis.from_url(config.redis_url)
    ctx = OperatorContext(operator=config.operator, instance=config.instance, prefix=config.prefix, redis=client,
                          params=dict(config.params))
    operator = factory(config.impl, ctx)
    # no deadline for the broker: an instance started while it is away (a replacement during a
    # restart) waits for it as a running one reconnects, until it is stopped
    runner = build_runner(config, operator, client, timeout_s=None)
    def stop(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        runner.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return runner.run(timeout_s=None)


if __name__ == "__main__":
    sys.exit(main())
