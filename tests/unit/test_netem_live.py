"""The emulated network on the live data path (operators/netem.py, testbed/live/netem.py): queue
names per instance, the sender's choice of instance, delay draws truncated at 0, loss decisions,
the counters behind `host_traffic`, and the configuration. Values are worked out in each test; the
live run itself is tests/integration/test_live_odp.py."""
from __future__ import annotations

import random
import threading
import time

import pytest

from operators.netem import (
    SAME_HOST,
    Draws,
    EmulatedSender,
    Interval,
    Link,
    NetCounters,
    NetView,
    RoundRobin,
    draw_delay_ms,
    lost,
    parse_entries,
    unavailable_hash,
    view_key,
)
from operators.runner_config import ConfigError as RunnerConfigError
from operators.runner_config import config_from_env
from operators.transports import MemoryTransport, OutMessage
from operators.wiring import WiringError, instance_edges, instance_queue, make_wiring
from testbed.config import ConfigError
from testbed.emulation import EmulationConfig, NetworkModel
from testbed.live.netem import network_view, serving_members
from testbed.live.rabbit_management import QueueStats, fold_depths
from testbed.model import InstanceState, InstanceView
from tests.conftest import compose_config

WIRING = make_wiring({"S": ["A", "B"]}, {"A": ["B"], "B": []}, "p")


# -- queue names ---------------------------------------------------------------------------------

def test_every_instance_has_its_own_queue_per_input_edge():
    [a] = instance_edges(WIRING, "A", "p-a-1")
    assert (a.producer, a.consumer, a.queue, a.dead_letter_queue) == ("S", "A", "p.S.A@p-a-1", "p.S.A@p-a-1.dead")
    assert [e.queue for e in instance_edges(WIRING, "B", "p-b-1")] == ["p.S.B@p-b-1", "p.A.B@p-b-1"]
    expanded = WIRING.with_instances({"p-b-1": "B", "p-a-2": "A", "p-a-1": "A"})
    assert [e.queue for e in expanded.edges] == ["p.S.A@p-a-1", "p.S.A@p-a-2", "p.S.B@p-b-1", "p.A.B@p-b-1"]
    assert expanded.prefix == "p" and expanded.sources == ("S",)
    with pytest.raises(WiringError, match="instance"):
        instance_queue(WIRING.edge("S", "A"), "a@1")
    with pytest.raises(WiringError, match="too long"):
        instance_queue(WIRING.edge("S", "A"), "x" * 250)


def test_depths_fold_the_instance_queues_onto_their_operator():
    expanded = WIRING.with_instances({"a1": "A", "a2": "A", "b1": "B"})
    stats = {"p.S.A@a1": QueueStats("p.S.A@a1", 3, 1), "p.S.A@a2": QueueStats("p.S.A@a2", 2, 0),
             "p.S.B@b1": QueueStats("p.S.B@b1", 1, 0), "p.A.B@b1": QueueStats("p.A.B@b1", 4, 0),
             "p.S.A@a1.dead": QueueStats("p.S.A@a1.dead", 1, 0)}
    depths = fold_depths(expanded, stats)
    assert depths.depths == {"A": 6, "B": 5} and depths.dead_letters == {"A": 1, "B": 0}
    assert set(depths.missing) == {"p.S.A@a2.dead", "p.S.B@b1.dead", "p.A.B@b1.dead"}


# -- the pure decisions --------------------------------------------------------------------------

def test_delay_draws_are_truncated_at_zero_by_redrawing():
    normals = iter([-11.0, -10.5, 0.5])  # 20 + 2 * z: -2 and -1 are redrawn, then 21
    assert draw_delay_ms(20.0, 2.0, lambda: next(normals)) == 21.0
    normals = iter([-1.5])
    assert draw_delay_ms(20.0, 2.0, lambda: next(normals)) == 17.0
    assert draw_delay_ms(0.0, 0.0, lambda: -3.0) == 0.0  # exactly 0 is kept


def test_losses_happen_with_probability_one_minus_availability():
    assert lost(0.99, lambda: 0.995) and not lost(0.99, lambda: 0.985)
    assert lost(0.99, lambda: 0.99)  # the uniform's top 1 % loses

    def no_draw() -> float:
        raise AssertionError("a fully available host draws nothing")

    assert not lost(1.0, no_draw)
    draws = Draws(7, "x")
    n = 20_000
    share = sum(lost(0.9, draws.uniform) for _ in range(n)) / n
    assert share == pytest.approx(0.1, abs=0.01)  # 4.7 standard deviations of a binomial share


def test_draws_are_seeded_per_sender_and_separate_for_delays_and_losses():
    a, b = Draws(3, "i-1"), Draws(3, "i-1")
    a.uniform()  # a loss draw does not shift the delay stream
    assert a.normal() == b.normal() == random.Random("3/i-1/delay").normalvariate(0.0, 1.0)
    assert Draws(3, "i-2").normal() != Draws(3, "i-1").normal()


def test_round_robin_goes_round_each_operator_on_its_own():
    rr = RoundRobin()
    members = (("a1", "vm1"), ("a2", "vm2"), ("a3", "vm2"))
    assert [rr.choose("A", members)[0] for _ in range(4)] == ["a1", "a2", "a3", "a1"]
    assert rr.choose("B", (("b1", "vm3"),)) == ("b1", "vm3")
    assert rr.choose("A", members[:2]) == ("a1", "vm1")  # the 5th turn (4) over two members: 4 mod 2 = 0


# -- the view ------------------------------------------------------------------------------------

def view_of(**links) -> NetView:
    return NetView(members={"A": (("a1", "vm1"), ("a2", "vm2")), "B": (("b1", "vm2"),)},
                   hosts={"vm1": 1.0, "vm2": 0.9},
                   links={("vm1", "vm2"): links.get("l12", Link(20.0, 2.0, 1.0)),
                          ("vm2", "vm1"): Link(25.0, 1.0, 1.0)})


def test_the_view_round_trips_and_a_host_reaches_itself_perfectly():
    view = view_of()
    back = NetView.decode(view.encode().encode())
    assert back == view
    assert back.link("vm1", "vm1") == SAME_HOST and back.link("vm2", "vm1") == Link(25.0, 1.0, 1.0)
    assert back.host_of("b1") == "vm2" and back.host_of("zz") is None


def test_the_runtime_view_uses_the_simulators_network_and_serving_instances():
    cfg = EmulationConfig(enabled=True, seed=1, availability={"vm2": 0.99})
    model = NetworkModel(cfg)
    views = [InstanceView("a2", "A", "vm2", InstanceState.running, 0.0),
             InstanceView("a1", "A", "vm1", InstanceState.running, 0.0),
             InstanceView("a3", "A", "vm3", InstanceState.starting, 0.0),  # A has running ones: not chosen
             InstanceView("a4", "A", "vm3", InstanceState.running, 0.0, active=False),  # switched off
             InstanceView("b1", "B", "vm3", InstanceState.starting, 0.0),  # B's only: chosen while starting
             InstanceView("c1", "C", "vm3", InstanceState.draining, 0.0)]
    members = serving_members(views)
    assert members == {"A": (("a1", "vm1"), ("a2", "vm2")), "B": (("b1", "vm3"),)}
    view = network_view(model, members, ["vm2", "vm1", "vm1"])
    assert view.hosts == {"vm1": 1.0, "vm2": 0.99}
    assert view.link("vm1", "vm2") == Link(model.mean_delay_ms("vm1", "vm2"), model.sd_delay_ms("vm1", "vm2"), 1.0)
    assert 12.0 <= view.link("vm2", "vm1").mean_ms <= 32.0 and set(view.links) == {("vm1", "vm2"), ("vm2", "vm1")}


# -- the sender ----------------------------------------------------------------------------------

class ViewStore:
    """What the sender reads of Redis: the view (get); the counters' writes are recorded (pipeline),
    and the loss count (operators.netem.COUNT_ONCE_LUA) is played with a set of finished ids."""

    def __init__(self, raw=None):
        self.raw = raw
        self.entries, self.incr = [], []
        self.finished, self._results = set(), []

    def get(self, _key):
        return self.raw

    def pipeline(self, transaction=True):
        return self

    def xadd(self, _stream, fields):
        self.entries.append(fields)

    def hincrby(self, key, field, n):
        self.incr.append((key, field, n))

    def register_script(self, _source):
        def count_once(keys, args, client=None):
            new = not keys or keys[0] not in self.finished
            if new:
                self.finished.update(keys)
                self.hincrby(args[1], args[2], 1)
            (client or self)._results.append(int(new))
        return count_once

    def execute(self):
        done, self._results = self._results, []
        return done


def sender_on(view: NetView, host="vm1", seed=5):
    inner = MemoryTransport()
    store = ViewStore(view.encode().encode())
    sender = EmulatedSender(inner, WIRING, host, store, seed, "s-1")
    assert sender._refresh()
    sender.inner.on_confirm = sender._confirmed
    confirmed = []
    sender.on_confirm = confirmed.extend
    return sender, inner, store, confirmed


def msg(producer: str, i: int) -> OutMessage:
    return OutMessage(producer, f"m/{i}", "m", b"{}", ref=f"input-{i}")


def test_the_sender_picks_instances_in_turn_and_delays_hops_between_hosts():
    sender, inner, store, confirmed = sender_on(view_of())
    expected = random.Random("5/s-1/delay")
    t0 = sender.clock()
    sender.publish_batch([msg("A", 1), msg("A", 2)])  # A -> B only: b1 on vm2 both times
    # both copies cross vm1 -> vm2 (mu 20, sd 2): delayed, nothing published yet
    assert inner.messages == [] and confirmed == [] and sender.outstanding() == 2
    d1, d2 = (20.0 + 2.0 * expected.normalvariate(0.0, 1.0) for _ in range(2))
    due = sorted(due for due, _, _ in sender._timers)
    assert due[0] - t0 == pytest.approx(d1 / 1000.0, abs=0.005) and due[1] - t0 == pytest.approx(d2 / 1000.0, abs=0.005)
    # the timer publishes them when due, to b1's own queue
    timer = threading.Thread(target=sender._timer_loop, daemon=True)
    timer.start()
    deadline = time.monotonic() + 5.0
    while len(confirmed) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [c.ref for c in confirmed] == ["input-1", "input-2"]  # the caller's messages, once each
    assert [m.destination for m in inner.messages] == ["p.A.B@b1", "p.A.B@b1"]
    assert sender.clock() - t0 >= max(d1, d2) / 1000.0
    sender._stop.set()
    with sender._cond:
        sender._cond.notify_all()
    timer.join(2.0)
    # the source S feeds A and B: one copy each; a1 shares vm1 (no delay), b1 next in B's turn
    sender.publish_batch([msg("S", 3)])
    assert [m.destination for m in inner.messages[2:]] == ["p.S.A@a1"]
    assert len(sender._timers) == 1 and sender._timers[0][2].destination == "p.S.B@b1"
    sender.counters.flush(store)
    [hop] = store.entries
    assert (hop["u"], hop["v"], hop["items"]) == ("vm1", "vm2", 3)
    assert hop["delay_ms"] == pytest.approx(d1 + d2 + 20.0 + 2.0 * expected.normalvariate(0.0, 1.0))


def test_a_hop_lost_on_its_link_is_counted_for_the_receiver_and_settles_the_message():
    sender, inner, store, confirmed = sender_on(view_of(l12=Link(20.0, 2.0, 1e-12)))
    sender.publish_batch([msg("A", 1)])
    assert inner.messages == [] and [c.ref for c in confirmed] == ["input-1"] and sender.outstanding() == 0
    sender.counters.flush(store)
    assert store.incr == [(unavailable_hash("p"), "B", 1)]  # link losses go into the hash here
    assert [(e["kind"], e["operator"], e["items"]) for e in store.entries] == [("lost", "B", 1)]


def test_messages_wait_for_a_receiver_and_go_out_once_one_serves():
    view = view_of()
    empty = NetView({"A": view.members["A"]}, view.hosts, view.links)  # B has no instance yet
    sender, inner, store, confirmed = sender_on(empty, host="vm2")
    sender.publish_batch([msg("A", 1)])
    assert sender.outstanding() == 1 and inner.messages == [] and len(sender._parked) == 1
    store.raw = view.encode().encode()
    assert sender._refresh()
    assert [m.destination for m in inner.messages] == ["p.A.B@b1"]  # b1 shares vm2: at once
    assert [c.ref for c in confirmed] == ["input-1"] and sender.outstanding() == 0


def test_the_receiver_loses_items_at_its_hosts_availability():
    sender, _, _, _ = sender_on(view_of(), host="vm2")  # A_vm2 = 0.9
    n = 20_000
    assert sum(sender.host_lost() for _ in range(n)) / n == pytest.approx(0.1, abs=0.01)
    fully, _, _, _ = sender_on(view_of(), host="vm1")
    assert not any(fully.host_lost() for _ in range(1000))


def test_counters_become_stream_entries_that_the_runtime_sums_per_pair():
    counters = NetCounters("p", "s-1", clock=lambda: 100.0)
    counters.hop("vm1", "vm2", 20.0)
    counters.hop("vm1", "vm2", 22.0)
    counters.hop("vm2", "vm1", 30.5)
    counters.lost("B", counted=True)  # the runner counted it in the hash already
    store = ViewStore()
    assert counters.flush(store) and store.incr == []
    interval = parse_entries([(f"{i}-0", {k.encode(): str(v).encode() for k, v in e.items()})
                              for i, e in enumerate(store.entries)], Interval())
    assert interval.hops == {("vm1", "vm2"): [2, 42.0], ("vm2", "vm1"): [1, 30.5]} and interval.lost == {"B": 1}
    assert parse_entries([("9-0", {"kind": "hop", "u": "vm1"})], Interval()).malformed == 1


def test_a_failed_counter_write_is_kept_for_the_next_flush():
    class Away(ViewStore):
        def execute(self):
            raise ConnectionError("Redis away")

    counters = NetCounters("p", "s-1")
    counters.hop("vm1", "vm2", 20.0)
    counters.lost("B", counted=False)
    assert not counters.flush(Away())
    store = ViewStore()
    counters.hop("vm1", "vm2", 10.0)
    assert counters.flush(store)
    hops = [e for e in store.entries if e["kind"] == "hop"]
    assert [(h["items"], h["delay_ms"])
            for h in hops] == [(2, 30.0)] and store.incr == [(unavailable_hash("p"), "B", 1)]


def test_the_view_key_is_the_runs():
    assert view_key("run-1") == "run-1:netem:view"


# -- configuration -------------------------------------------------------------------------------

def test_the_runner_reads_its_host_and_seed_and_needs_rabbitmq():
    env = {"OPERATOR": "A", "RUN_PREFIX": "p", "TOPOLOGY": '{"sources": {"S": ["A"]}, "operators": {"A": []}}'}
    assert config_from_env(env).emulation_host == ""  # default: shared queues, no emulation
    cfg = config_from_env({**env, "EMULATION_HOST": "vm3", "EMULATION_SEED": "4"})
    assert (cfg.emulation_host, cfg.emulation_seed) == ("vm3", 4)
    with pytest.raises(RunnerConfigError, match="EMULATION_HOST"):
        config_from_env({**env, "EMULATION_HOST": "vm3", "TRANSPORT": "kafka"})
    with pytest.raises(RunnerConfigError, match="EMULATION_SEED"):
        config_from_env({**env, "EMULATION_SEED": "x"})


@pytest.mark.slow
def test_the_live_backend_accepts_the_emulated_network_on_rabbitmq_in_tuple_mode():
    cfg = compose_config("evaluation=odp", "backend=docker")
    assert cfg.backend.emulation.enabled
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=odp", "backend=docker", "backend.live.transport=kafka")
    assert err.value.key == "backend.emulation.enabled"
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=odp", "backend=docker", "backend.emulation.mode=outage")
    assert err.value.key == "backend.emulation.mode"


def test_the_runtime_turns_the_reports_into_host_traffic_and_unavailable_drops():
    from testbed.live.netem import LiveNetwork
    from testbed.monitoring import new_monitor_tables

    class Stream:
        """Redis' XREAD over a fixed list of entries, from an id on."""

        def __init__(self, entries):
            self.entries = entries

        def xread(self, streams, count):
            [(key, after)] = streams.items()
            rest = [e for e in self.entries if int(e[0].split(b"-")[0]) > int(str(after).split("-")[0])][:count]
            return [(key, rest)] if rest else []

    def entry(i, **fields):
        return (f"{i}-0".encode(), {k.encode(): str(v).encode() for k, v in fields.items()})

    stream = Stream([entry(1, kind="hop", u="vm1", v="vm2", items=2, delay_ms=41.0),
                     entry(2, kind="hop", u="vm1", v="vm2", items=1, delay_ms=22.0),
                     entry(3, kind="lost", operator="B", items=3)])
    network = LiveNetwork(EmulationConfig(enabled=True), WIRING, "amqp://unused", stream, seed=1)
    tables = new_monitor_tables(samples=True)
    network.record(tables, 15.0)
    assert tables["host_traffic"] == {"t_s": [15.0], "source_host": ["vm1"], "target_host": ["vm2"], "items": [3],
                                      "delay_ms": [21.0]}
    assert tables["dropped"] == {"t_s": [15.0], "operator": ["B"], "reason": ["unavailable"], "items": [3]}
    stream.entries.append(entry(4, kind="hop", u="vm2", v="vm1", items=1, delay_ms=25.0))
    network.record(tables, 30.0)  # only what came since
    assert tables["host_traffic"]["items"] == [3, 1] and tables["dropped"]["items"] == [3]
