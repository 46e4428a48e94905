"""The live DABS-like restart's parts that need nothing running: the provider held at the source
(data_provider/source_gate.py) with the memory transport and a fake clock, and the executor's
restart (testbed/live/executor.py) against a recording switchboard and a hand-built pool."""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from data_provider.config import compose_provider
from data_provider.emitter import Emitter, FakeClock, TickResult
from data_provider.provider import Provider, source_specs
from data_provider.source_gate import GatedEmit, SourceGate
from data_provider.transports import MemoryTransport
from operators.envelope import Envelope
from testbed.actions import dispatch
from testbed.live.executor import LiveExecutor
from testbed.model import InstanceState, InstanceView, Restart
from testbed.workloads.patterns import make_pattern

TICK_MS = 480.0


def test_held_ticks_enter_after_the_gate_opens_stamped_then(tmp_path):
    cfg = compose_provider(["transport=memory", f"out={tmp_path}", "run_id=unit", "pattern=constant",
                            "pattern.levels=[1]"])
    clock = FakeClock(wall_start_ms=1_763_788_800_000)
    transport = MemoryTransport()
    provider = Provider(make_pattern(cfg.pattern), source_specs(cfg), transport, 1, TICK_MS, cfg.payloads, clock)
    gate = SourceGate()
    gated = GatedEmit(provider.emit_tick, gate, clock)
    published: List[int] = []  # items published after each tick

    def after(result: TickResult) -> None:
        published.append(len(transport.messages))
        if result.tick.k == 2:
            gate.close()  # ticks 3, 4 and 5 are held
        if result.tick.k == 5:
            gate.open()  # they enter with tick 6

    per_tick = sum(s.items_per_tick for s in source_specs(cfg))  # one machine
    Emitter(TICK_MS / 1000.0, 8, gated, clock, on_tick=after).run()
    assert published == [per_tick * k for k in (1, 2, 3, 3, 3, 3, 7, 8)]
    assert gated.held == [] and gated.held_ticks == 3
    assert sum(provider.items.values()) == 8 * per_tick  # emitted = published, nothing lost
    ticks = [int(m.item_id.split("/")[2]) for m in transport.messages]
    assert ticks == sorted(ticks)  # held ticks go out in order, before tick 6
    # the held ticks are stamped at their release (tick 6's due time): latency and timeout start then
    release_ms = 1_763_788_800_000 + 6 * TICK_MS
    origin = {k: [] for k in range(8)}
    for m in transport.messages:
        origin[int(m.item_id.split("/")[2])].append(Envelope.decode(m.body).origin_ms)
    for k in (3, 4, 5):
        assert release_ms - TICK_MS < min(origin[k]) and max(origin[k]) <= release_ms
    assert max(origin[2]) <= 1_763_788_800_000 + 2 * TICK_MS
    # the load table keeps each tick at its scheduled time
    times = sorted(set(provider.load["t_s"]))
    assert times == [k * TICK_MS / 1000.0 for k in range(8)]


def test_release_publishes_what_a_closed_gate_still_holds(tmp_path):
    cfg = compose_provider(["transport=memory", f"out={tmp_path}", "run_id=unit", "pattern=constant"])
    clock = FakeClock()
    transport = MemoryTransport()
    provider = Provider(make_pattern(cfg.pattern), source_specs(cfg), transport, 1, TICK_MS, cfg.payloads, clock)
    gate = SourceGate()
    gated = GatedEmit(provider.emit_tick, gate, clock)
    gate.close()
    Emitter(TICK_MS / 1000.0, 3, gated, clock).run()
    assert transport.messages == [] and sum(provider.items.values()) == 0
    gated.release()  # the provider thread does this after its last tick
    assert len(transport.messages) == sum(provider.items.values()) > 0


class Switchboard:
    def __init__(self) -> None:
        self.flags: Dict[str, bool] = {}
        self.purges: List[bool] = []

    def set_active(self, instance: str, active: bool) -> None:
        self.flags[instance] = active

    def purge(self, entry: bool = True) -> Tuple[Dict[str, int], Dict[str, int]]:
        self.purges.append(entry)
        return {"A": 5 if entry else 0, "B": 3}, {} if entry else {"A": 7}


class Pool:
    def __init__(self) -> None:
        self.instances = [InstanceView(f"{o}-{k}", o, "h1", InstanceState.running, 0.0) for o in "AB" for k in (1, 2)]

    def instance_views(self) -> Tuple[InstanceView, ...]:
        return tuple(self.instances)

    def host_views(self, t: float):
        return ()


def test_the_restart_keeps_the_entry_queue_and_holds_the_source():
    board, gate = Switchboard(), SourceGate()
    executor = LiveExecutor(Pool(), {}, lambda o: {}, switchboard=board)  # type: ignore[arg-type]
    executor.source_gate = gate
    executor.scalings = {"A": 0, "B": 0}
    executor.apply(100.0, [Restart(10.0, True, "rescale", source="hold", purge_entry=False)])
    assert board.purges == [False] and executor.take_purged() == {"A": 0, "B": 3}
    assert executor.entry_kept == [{"A": 7}]
    assert not gate.is_open and not any(board.flags.values())  # every replica off, the provider held
    reason = executor.records[-1].reason
    assert "entry queues kept" in reason and "arrivals held at the source" in reason
    executor.progress(109.0)
    assert not gate.is_open
    executor.progress(110.0)  # the downtime is over: replicas and provider resume together
    assert gate.is_open and all(board.flags.values())
    # the platform's default restart purges every queue and leaves the provider alone
    records: List = []
    dispatch(200.0, [Restart(10.0, True, "again")], executor, records, executor.scalings)
    assert board.purges == [False, True] and gate.is_open and executor.purged_total == {"A": 5, "B": 6}
    assert executor.entry_kept == [{"A": 7}]


def test_holding_needs_the_provider():
    executor = LiveExecutor(Pool(), {}, lambda o: {}, switchboard=Switchboard())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="source gate"):
        executor.apply(0.0, [Restart(10.0, False, "x", source="hold")])


def test_a_gate_closed_with_drop_drops_the_ticks(tmp_path):
    cfg = compose_provider(["transport=memory", f"out={tmp_path}", "run_id=unit", "pattern=constant",
                            "pattern.levels=[1]"])
    clock = FakeClock()
    transport = MemoryTransport()
    provider = Provider(make_pattern(cfg.pattern), source_specs(cfg), transport, 1, TICK_MS, cfg.payloads, clock)
    gate = SourceGate()
    gated = GatedEmit(provider.emit_tick, gate, clock, provider.drop_tick)

    def after(result: TickResult) -> None:
        if result.tick.k == 1:
            gate.close("drop")  # ticks 2 and 3 are dropped
        if result.tick.k == 3:
            gate.open()

    per_tick = sum(s.items_per_tick for s in source_specs(cfg))
    Emitter(TICK_MS / 1000.0, 6, gated, clock, on_tick=after).run()
    ticks = sorted({int(m.item_id.split("/")[2]) for m in transport.messages})
    assert ticks == [0, 1, 4, 5] and gated.held == [] and gated.dropped_items == 2 * per_tick
    assert sum(provider.items.values()) == 4 * per_tick == len(transport.messages)  # emitted = published
    assert sum(provider.load["items"]) == 6 * per_tick  # the load table has every tick
    executor = LiveExecutor(Pool(), {}, lambda o: {}, switchboard=Switchboard())  # type: ignore[arg-type]
    executor.source_gate = gate
    executor.scalings = {"A": 0, "B": 0}
    executor.apply(10.0, [Restart(5.0, True, "rescale", source="drop")])
    assert not gate.is_open and gate.mode == "drop"
    assert "arrivals dropped at the source" in executor.records[-1].reason
