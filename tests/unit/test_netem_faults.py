"""Faults during an emulated-network live run, the parts without services
(docs/papers/odp.md#faults-during-an-emulated-network-run): what a sender does with the copies it delays while the
broker is away, how long the queues of an instance that went are handed on, the view writes while Redis is away,
and the watch that ends a run whose Redis lost its state. The live run with the faults is
tests/integration/test_live_odp_faults.py."""
from __future__ import annotations

import threading
import time
from typing import List, Optional

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from operators.netem import EmulatedSender, Link, NetView
from operators.transports import OutMessage, TransportStats
from operators.wiring import make_wiring
from testbed.emulation import EmulationConfig
from testbed.live.monitor import RedisStateWatch
from testbed.live.netem import REHOME_S, LiveNetwork, rehome_due
from testbed.model import InstanceState, InstanceView

WIRING = make_wiring({"S": ["A", "B"]}, {"A": ["B"], "B": []}, "p")
VIEW = NetView(members={"A": (("a1", "vm1"),), "B": (("b1", "vm2"),)}, hosts={"vm1": 1.0, "vm2": 1.0},
               links={("vm1", "vm2"): Link(20.0, 2.0, 1.0), ("vm2", "vm1"): Link(20.0, 2.0, 1.0)})


class BrokerAway:
    """A publisher in front of a broker that went away: it takes what it is given (as RabbitPublisher
    queues it for its reconnection) and confirms nothing until `back`, then everything once."""

    def __init__(self) -> None:
        self.stats = TransportStats()
        self.on_confirm = None
        self.held: List[OutMessage] = []
        self.lock = threading.Lock()

    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        pass

    def publish_batch(self, messages) -> None:
        with self.lock:
            self.held.extend(messages)

    def back(self) -> List[OutMessage]:
        with self.lock:
            sent, self.held = self.held, []
        self.on_confirm(sent)
        return sent

    def flush(self, timeout_s: float = 30.0) -> bool:
        return not self.held

    def close(self, timeout_s: float = 30.0) -> None:
        pass


class ViewOnly:
    def __init__(self, raw: bytes):
        self.raw = raw

    def get(self, _key):
        return self.raw


def test_copies_delayed_while_the_broker_is_away_wait_for_it_and_settle_their_input_once():
    inner = BrokerAway()
    sender = EmulatedSender(inner, WIRING, "vm1", ViewOnly(VIEW.encode().encode()), 7, "s-1")
    assert sender._refresh()
    inner.on_confirm = sender._confirmed
    settled: List[OutMessage] = []
    sender.on_confirm = settled.extend
    # S feeds A (a1 on vm1: no delay) and B (b1 on vm2: delayed about 20 ms)
    sender.publish_batch([OutMessage("S", f"m/{i}", "m", b"{}", ref=f"input-{i}") for i in range(3)])
    timer = threading.Thread(target=sender._timer_loop, daemon=True)
    timer.start()
    deadline = time.monotonic() + 5.0
    while len(inner.held) < 6 and time.monotonic() < deadline:
        time.sleep(0.005)
    # the delayed copies left the timer for the publisher, which holds them: no input settled yet
    assert sorted(m.destination for m in inner.held) == ["p.S.A@a1"] * 3 + ["p.S.B@b1"] * 3
    assert settled == [] and sender.outstanding() == 3 and not sender._timers
    inner.back()  # the broker is back: every copy confirmed, each input settled once
    assert sorted(m.ref for m in settled) == ["input-0", "input-1", "input-2"] and sender.outstanding() == 0
    sender._stop.set()
    with sender._cond:
        sender._cond.notify_all()
    timer.join(2.0)


def test_a_gone_instances_queues_are_handed_on_for_the_window_after_it_went_or_after_the_broker_came_back():
    assert rehome_due(100.0, None, 100.0 + REHOME_S)
    assert not rehome_due(100.0, None, 100.0 + REHOME_S + 0.1)
    # the broker was away until 125 s: senders republish what they held when it is back
    assert rehome_due(100.0, 125.0, 125.0 + REHOME_S)
    assert not rehome_due(100.0, 125.0, 125.0 + REHOME_S + 0.1)
    assert not rehome_due(100.0, 50.0, 100.0 + REHOME_S + 0.1)  # an earlier outage changes nothing


class NoBroker(LiveNetwork):
    """The runtime's network with a broker that may be away: a rehome then fails as pika's would."""

    attempts = 0
    broker_up = False

    def rehome(self, gone):
        self.attempts += 1
        if not self.broker_up:
            raise OSError("connection refused")
        return {}


class FlakyRedis:
    def __init__(self) -> None:
        self.away = False
        self.values = {}

    def set(self, key, value):
        if self.away:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.values[key] = value


def views(*ids: str):
    return [InstanceView(i, "A", "vm1", InstanceState.running, 0.0) for i in ids]


def test_a_failed_rehome_keeps_the_gone_instance_due_and_a_failed_view_write_is_retried():
    now = [0.0]
    redis = FlakyRedis()
    network = NoBroker(EmulationConfig(enabled=True), WIRING, "amqp://unused", redis, seed=1)
    network.clock = lambda: now[0]
    network.instances = {"a1": "A", "a2": "A"}
    network.hosts = {"a1": "vm1", "a2": "vm1"}
    network.sync(views("a1", "a2"))
    assert '"a1"' in redis.values["p:netem:view"] and network.attempts == 0
    redis.away = True
    now[0] = 10.0
    network.sync(views("a2"))  # a1 went; the view cannot be written, the broker is away
    assert network.view_failures == 1 and network.attempts == 1 and network.broker_failed_at == 10.0
    assert '"a1"' in redis.values["p:netem:view"]  # the old view stays until a write succeeds
    redis.away = False
    now[0] = 30.0
    network.sync(views("a2"))  # the broker is still away
    assert '"a1"' not in redis.values["p:netem:view"] and network.attempts == 2 and network.broker_failed_at == 30.0
    network.broker_up = True
    now[0] = 30.0 + REHOME_S - 1  # past a1's own window, within the one after the broker was last away
    network.sync(views("a2"))
    assert network.attempts == 3
    now[0] = 30.0 + REHOME_S + 1
    network.sync(views("a2"))
    assert network.attempts == 3  # no longer checked
    assert network.details()["gone"] == ["a1"] and network.details()["view_write_failures"] == 1


class FakeRedisServer:
    """What the watch asks of Redis: INFO's run_id, SET and EXISTS of its marker; it can restart
    (a new run_id, its keys gone) or be away."""

    def __init__(self) -> None:
        self.run_id, self.keys, self.away = "r1", set(), False

    def _up(self) -> None:
        if self.away:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    def info(self, _section):
        self._up()
        return {"run_id": self.run_id}

    def set(self, key, _value):
        self._up()
        self.keys.add(key)

    def exists(self, key):
        self._up()
        return int(key in self.keys)

    def restart(self) -> None:
        self.run_id, self.keys = "r2", set()


def test_the_watch_names_a_restarted_redis_with_the_time():
    server = FakeRedisServer()
    watch = RedisStateWatch(server, "run-1", outage_s=30.0)
    assert watch.check(1.0) is None  # not started: nothing to lose yet
    watch.start()
    assert watch.check(5.0) is None
    server.restart()
    reason: Optional[str] = watch.check(42.4)
    assert reason is not None and reason.startswith("Redis lost the run's state at t=42 s: it restarted")
    assert "finished item ids" in reason and "\n" not in reason


def test_the_watch_tolerates_a_short_outage_and_ends_a_long_one():
    server = FakeRedisServer()
    watch = RedisStateWatch(server, "run-1", outage_s=30.0)
    watch.start()
    server.away = True
    assert watch.check(10.0) is None and watch.check(39.0) is None  # away, within the limit
    server.away = False
    assert watch.check(40.0) is None  # back with its state: the outage is over
    server.away = True
    assert watch.check(50.0) is None
    reason = watch.check(80.5)
    assert reason is not None and reason.startswith("Redis unreachable since t=50 s, more than 30 s")
    assert "Connection refused" in reason and "\n" not in reason


def test_the_watch_notices_the_runs_keys_flushed_under_a_running_redis():
    server = FakeRedisServer()
    watch = RedisStateWatch(server, "run-1", outage_s=30.0)
    watch.start()
    server.keys.clear()
    assert "keys are gone" in watch.check(12.0)


def test_the_job_modes_reason_is_unchanged_by_the_named_state():
    from testbed.live.job_routing import redis_loss

    assert "keyed state, counts and checkpoints" in redis_loss(3.0, "a", "b", False)
    assert "operator state" in redis_loss(3.0, "a", "b", False, "operator state")


# -- link losses: counted at once, once per item and receiver ----------------------------------

LOSSY = NetView(members=VIEW.members, hosts=VIEW.hosts,
                links={("vm1", "vm2"): Link(20.0, 2.0, 1e-12), ("vm2", "vm1"): Link(20.0, 2.0, 1e-12)})


class CountingRedis:
    """The sender's Redis: the view, and COUNT_ONCE_LUA played with a set of finished ids; `away`
    makes every call fail as redis-py's would."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.away = raw, False
        self.finished, self.counts, self._queued = set(), {}, []

    def get(self, _key):
        return self.raw

    def register_script(self, _source):
        def count_once(keys, args, client=None):
            self._queued.append((keys, args))  # run by the pipeline's execute
        return count_once

    def pipeline(self, transaction=True):
        self._queued = []
        return self

    def execute(self):
        queued, self._queued = self._queued, []
        if self.away:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        done = []
        for keys, args in queued:
            new = not keys or keys[0] not in self.finished
            if new:
                self.finished.update(keys)
                self.counts[(args[1], args[2])] = self.counts.get((args[1], args[2]), 0) + 1
            done.append(int(new))
        return done


def lossy_sender(store: CountingRedis):
    from operators.transports import MemoryTransport

    inner = MemoryTransport()
    sender = EmulatedSender(inner, WIRING, "vm1", store, 7, "s-1")
    assert sender._refresh()
    inner.on_confirm = sender._confirmed
    settled: List[OutMessage] = []
    sender.on_confirm = settled.extend
    return sender, inner, settled


def test_a_link_loss_is_counted_before_its_input_settles_and_once_when_the_input_comes_again():
    store = CountingRedis(LOSSY.encode().encode())
    sender, inner, settled = lossy_sender(store)
    message = OutMessage("A", "m/1", "m", b"{}", ref="input-1")  # A -> B: b1 on vm2, every hop lost
    sender.publish_batch([message])
    assert store.counts == {("p:unavailable", "B"): 1} and [m.ref for m in settled] == ["input-1"]
    assert inner.messages == [] and sender.outstanding() == 0
    assert "p:B:finished:A:m/1" in store.finished  # the receiver's finished id: a copy that comes later is a duplicate
    sender.publish_batch([message])  # the input processed again (redelivered): its loss counts once
    assert store.counts == {("p:unavailable", "B"): 1} and [m.ref for m in settled] == ["input-1", "input-1"]
    assert sender.counters.lost_total == 1  # the per-interval report follows the count


def test_a_link_loss_redis_cannot_count_is_not_made_the_copy_is_delivered():
    store = CountingRedis(LOSSY.encode().encode())
    sender, inner, settled = lossy_sender(store)
    store.away = True
    sender.publish_batch([OutMessage("A", "m/1", "m", b"{}", ref="input-1")])
    assert store.counts == {} and settled == [] and sender.outstanding() == 1
    [(_due, _seq, copy)] = sender._timers  # delayed like any hop between hosts
    assert copy.destination == "p.A.B@b1" and sender.counters.hops_total == 1


def test_a_message_with_nothing_downstream_is_done_at_once():
    store = CountingRedis(VIEW.encode().encode())
    sender, inner, settled = lossy_sender(store)
    sender.publish_batch([OutMessage("B", "m/1", "m", b"{}", ref="input-1")])  # B is a sink
    assert [m.ref for m in settled] == ["input-1"] and sender.outstanding() == 0 and inner.messages == []


def test_the_live_run_ends_with_the_watchs_reason():
    from testbed.live.run import LiveRun, LiveRunError

    server = FakeRedisServer()
    run = LiveRun.__new__(LiveRun)  # only what the check reads: its clock and its watch
    run.wall, run._t0 = (lambda: 100.0), 58.0
    run.redis_watch = RedisStateWatch(server, "run-1", outage_s=LiveRun.REDIS_OUTAGE_S)
    run.redis_watch.start()
    run._check_redis()  # the state holds: nothing happens
    server.restart()
    with pytest.raises(LiveRunError, match=r"^Redis lost the run's state at t=42 s: it restarted"):
        run._check_redis()


def test_an_input_delivered_again_while_its_emissions_wait_is_settled_with_them_not_processed_twice():
    """After a broker restart the source's old deliveries are stale and the broker hands the same
    inputs out again, to the same instance's own queue, while their emissions may still wait at the
    publisher for the broker."""
    from operators.sources import Outcome
    from tests.unit.runner_fakes import RunnerFactory, envelope, wait_until

    factory = RunnerFactory()
    runner, source, publisher = factory.make()
    try:
        source.push(envelope(1), token=1)
        wait_until(lambda: len(publisher.published) == 2)
        source.stale_tokens.add(1)  # the connection that delivered it is gone
        source.push(envelope(1), token=2)  # the broker's redelivery
        wait_until(lambda: runner.stats.duplicates == 1)
        assert len(publisher.published) == 2 and source.settled == []  # not processed again
        publisher.confirm(2)
        wait_until(lambda: len(source.settled) == 2)
        assert sorted(source.settled) == [(1, Outcome.ACK), (2, Outcome.ACK)] and runner.held() == 0
        assert runner.stats.processed == 1
        source.push(envelope(1), token=3)  # once finished it is no longer waiting: processed (no dedup here)
        wait_until(lambda: len(publisher.published) == 4)
        publisher.confirm(2)
        wait_until(lambda: len(source.settled) == 3)
    finally:
        factory.close()


def test_an_instance_placed_while_the_broker_is_away_joins_the_view_once_its_queues_are_declared(monkeypatch):
    """The watchdog's replacement during a broker outage: placing it neither waits for the broker
    nor fails the run; it is no receiver until its queues exist (the broker would drop a copy sent
    to a queue that does not), and a later sync declares them."""
    from operators.transports import BrokerUnreachable

    broker_up, declared = [False], []

    def declare(url, wiring, edges, timeout_s=30.0, cancel=None):
        assert timeout_s == 0.0  # one attempt: the control loop goes on meanwhile
        if not broker_up[0]:
            raise BrokerUnreachable("RabbitMQ at amqp://unused not reachable within 0 s")
        declared.append(sorted(e.queue for e in edges))

    monkeypatch.setattr("testbed.live.netem.declare_queues", declare)
    now = [5.0]
    network = LiveNetwork(EmulationConfig(enabled=True), WIRING, "amqp://unused", FlakyRedis(), seed=1)
    network.clock = lambda: now[0]
    network.register("a2", "A", "vm1")
    network.sync(views("a2"))
    assert network.members == {} and network.undeclared == {"a2": "A"} and network.broker_failed_at == 5.0
    now[0] = 9.0
    network.sync(views("a2"))  # still away: tried again
    assert network.members == {} and network.broker_failed_at == 9.0
    broker_up[0] = True
    network.sync(views("a2"))
    assert network.members == {"A": (("a2", "vm1"),)} and network.undeclared == {}
    assert declared == [["p.S.A@a2"]] and network.details()["declared_late"] == ["a2"]


def test_the_verdict_at_the_runs_end_waits_for_a_redis_that_does_not_answer():
    """A restart during the final drain may leave Redis away when the run asks: it is asked again
    until it answers (a restart: the run's state is lost) or has been away for the outage limit."""
    server = FakeRedisServer()
    watch = RedisStateWatch(server, "run-1", outage_s=30.0)
    watch.start()
    assert watch.confirm(90.0) is None  # the state holds: at once
    clock = [0.0]

    def sleep(s: float) -> None:
        clock[0] += s
        if clock[0] >= 2.0:  # back after 2 s, restarted
            server.away = False
            server.restart()

    server.away = True
    reason = watch.confirm(95.4, clock=lambda: clock[0], sleep=sleep)
    assert reason is not None and reason.startswith("Redis lost the run's state at t=95 s: it restarted"), reason
    assert clock[0] == pytest.approx(2.0)

    server = FakeRedisServer()
    watch = RedisStateWatch(server, "run-1", outage_s=30.0)
    watch.start()
    server.away = True
    clock[0] = 0.0
    reason = watch.confirm(95.0, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    assert reason is not None and reason.startswith("Redis unreachable since t=95 s, more than 30 s"), reason
    assert clock[0] == pytest.approx(30.0)


def test_a_redis_away_for_longer_than_the_limit_ends_the_live_run_naming_when_it_went():
    from testbed.live.run import LiveRun, LiveRunError

    server = FakeRedisServer()
    now = [100.0]
    run = LiveRun.__new__(LiveRun)
    run.wall, run._t0 = (lambda: now[0]), 58.0
    run.redis_watch = RedisStateWatch(server, "run-1", outage_s=LiveRun.REDIS_OUTAGE_S)
    run.redis_watch.start()
    server.away = True
    for step in range(int(LiveRun.REDIS_OUTAGE_S)):  # the control loop's checks, one per second
        now[0] = 100.0 + step
        run._check_redis()  # tolerated: runners keep their counts for later
    now[0] = 100.0 + LiveRun.REDIS_OUTAGE_S + 1
    with pytest.raises(LiveRunError, match=r"^Redis unreachable since t=42 s, more than 30 s"):
        run._check_redis()


def test_only_items_lost_make_a_live_run_incomplete_an_excess_is_recorded():
    """Delivery is at least once across faults: an operator whose processed items exceed its inflow
    (a copy counted twice) is recorded as excess; one with fewer (an item lost) is the run's verdict."""
    from testbed.live.run import Accounting
    from testbed.run_result import verdict

    acc = Accounting(emitted={"S": 10}, inflow={"O1": 10, "O2": 10, "O3": 10}, processed={"O1": 12, "O2": 9, "O3": 10},
                     queued={}, dead={}, missing={"O1": -2, "O2": 1})
    assert acc.lost() == {"O2": 1} and acc.excess() == {"O1": 2}
    reason = verdict(imbalances={f"missing items of {o}": m for o, m in acc.lost().items()})
    assert reason == "accounting does not balance: missing items of O2 = +1"
    only_excess = Accounting(emitted={}, inflow={}, processed={}, queued={}, dead={}, missing={"O6": -4})
    assert only_excess.lost() == {} and verdict(imbalances=only_excess.lost()) is None
