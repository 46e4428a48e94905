"""A restart that pauses the sources' trace (Restart.source `pause`, the DABS-like baseline's
`source=pause`): in both simulator models (cohort and per-item) and at the live provider's gate
(memory transport, fake clock). Expected figures are worked out by hand in the comments."""
from __future__ import annotations

from typing import List

import pandas as pd
import pytest

from data_provider.config import compose_provider
from data_provider.emitter import Emitter, FakeClock, TickResult
from data_provider.provider import Provider, source_specs
from data_provider.source_gate import GatedEmit, SourceGate
from data_provider.transports import MemoryTransport
from testbed.model import Restart, Snapshot
from testbed.policies.dabs import DabsParams
from testbed.sim.clock import SourcePause
from testbed.workloads.patterns import make_pattern


def run_paused(exact: bool, source: str = "pause", emulated: bool = False):
    """The chain S -> A -> B (10 items per 0.5 s tick and machine: 20 items/s per machine) for 4
    minutes on a pattern of 1, 3, 1, 3 machines a minute each; a restart at 30 s, 45 s down,
    queues kept (nothing is purged). `emulated`: the per-item model with the emulated network (every
    host available: nothing lost on the way)."""
    from testbed.experiment import build_pattern, config_for, plan_runs
    from testbed.sim.simulator import Simulation
    from tests.conftest import compose_config
    from tests.unit.test_platform_sim import CHAIN, Scripted

    def script(s: Snapshot) -> List:
        return [Restart(45.0, False, "rescale", source=source)] if s.t == 30 else []

    cfg = compose_config("policy=threshold", "reps=1", "profile=paper", "pattern=constant", "pattern.levels=[1,3]",
                         "pattern.step_minutes=1", "duration_min=4", "runtime.reasoning_s=30",
                         "runtime.monitoring_s=15", "backend.hop_latency_ms=0", "runtime.sample_every=1",
                         "backend.step_ms=500", f"backend.exact={str(exact).lower()}",
                         f"backend.emulation.enabled={str(emulated).lower()}")
    cfg.topology = CHAIN
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    policy = Scripted(script)
    result = Simulation(run_cfg, policy, build_pattern(run_cfg.pattern, cfg.seed), 3, spec.btu_minutes).run()
    return {k: pd.DataFrame(v) for k, v in result.tables.items()}, policy


# Pattern time p is emitted at p (p < 30) or p + 45 (p >= 30); the run ends at 240 s, so the trace
# from p = 195 s on is never emitted. Emission times and items:
#   [0, 30)    p [0, 30)     1 machine   60 ticks x 10 =  600
#   [30, 75)   nothing
#   [75, 105)  p [30, 60)    1 machine   60 ticks x 10 =  600
#   [105, 165) p [60, 120)   3 machines 120 ticks x 30 = 3600
#   [165, 225) p [120, 180)  1 machine  120 ticks x 10 = 1200
#   [225, 240) p [180, 195)  3 machines  30 ticks x 30 =  900
# in all 6900 items (unpaused: 9600; the 2700 of p [195, 240) are the tail not emitted).
PER_INTERVAL = [300, 300, 0, 0, 0, 300, 300, 900, 900, 900, 900, 300, 300, 300, 300, 900]  # 15 s each


@pytest.mark.parametrize("exact, emulated", [(False, False), (True, False), (True, True)])
def test_pause_shifts_the_trace_by_the_downtime_and_loses_nothing(exact, emulated):
    tables, policy = run_paused(exact, emulated=emulated)
    load, edges = tables["load"], tables["edges"]
    # the load table: the ticks emitted, at their emission time
    assert load["items"].sum() == 6900 and len(load) == 60 + 60 + 120 + 120 + 30
    assert load[(load.t_s >= 30.0) & (load.t_s < 75.0)].empty
    assert load.t_s.min() == 0.0 and load.t_s.max() == 239.5
    assert load[load.t_s == 75.0]["machines"].iloc[0] == 1  # p = 30
    assert load[load.t_s == 105.0]["machines"].iloc[0] == 3  # p = 60
    assert load[load.t_s == 164.5]["machines"].iloc[0] == 3  # p = 119.5
    assert load[load.t_s == 165.0]["machines"].iloc[0] == 1  # p = 120
    assert load[load.t_s == 225.0]["machines"].iloc[0] == 3  # p = 180
    into_a = edges[edges.source == "S"].sort_values("t_s")["items"].tolist()
    assert into_a == PER_INTERVAL
    # the policy sees the input rate of the interval before each reasoning time
    rates = {s.t: s.input_rate for s in policy.seen}
    assert rates[60.0] == 0.0 and rates[90.0] == 20.0 and rates[120.0] == 60.0 and rates[180.0] == 20.0
    # nothing dropped at the source or anywhere: received = processed + queued
    assert tables["dropped"].empty or tables["dropped"]["items"].sum() == 0
    received = edges.groupby("target")["items"].sum()
    queued = tables["queues"].groupby("operator")["depth"].last()
    done = tables["processed"].groupby("operator")["items"].sum()
    assert received["A"] == 6900
    for o in ("A", "B"):
        assert received[o] == done[o] + queued[o]
    assert "the sources' trace paused" in tables["actions"].query("action == 'restart'").reason.iloc[0]


def test_the_cohort_and_per_item_models_agree_on_a_paused_source():
    cohort, _ = run_paused(False)
    item, _ = run_paused(True)
    pd.testing.assert_frame_equal(cohort["load"], item["load"])
    into_a = [t[t.source == "S"].reset_index(drop=True) for t in (cohort["edges"], item["edges"])]
    pd.testing.assert_frame_equal(into_a[0], into_a[1])
    # one A instance serves 10 items/s (150 per interval) and nothing in the downtime [30, 75): the
    # same in both models up to an item at interval borders (the per-item model adds up 0.1 s
    # service times, so its 150th start falls just before 15 s)
    a = [t[t.operator == "A"].sort_values("t_s")["items"].to_numpy() for t in (cohort["processed"], item["processed"])]
    assert a[0].tolist() == [150, 150, 0, 0, 0] + [150] * 11
    assert a[0].sum() == 150 * 13 and abs(a[0] - a[1]).max() <= 1 and abs(a[1].sum() - a[0].sum()) <= 1
    # what A sends on leaves spread over the step in the cohort model: B's intervals may differ by
    # an item at their borders, its total not by more
    into_b = [t[t.source == "A"]["items"].sum() for t in (cohort["edges"], item["edges"])]
    assert abs(into_b[0] - into_b[1]) <= 1


def test_hold_keeps_the_schedule_and_emits_the_whole_trace():
    """Beside pause: with hold the load table keeps every scheduled tick (9600 items) and A receives
    them on schedule (they wait at the source, counted when emitted), those of [30, 75) entering
    its queue at 75 s."""
    tables, _ = run_paused(False, "hold")
    assert tables["load"]["items"].sum() == 9600
    into_a = tables["edges"][tables["edges"].source == "S"].sort_values("t_s")["items"].tolist()
    assert into_a == [300] * 4 + [900] * 4 + [300] * 4 + [900] * 4


def test_overlapping_downtimes_stop_the_trace_clock_once():
    pause = SourcePause()
    assert pause.stop(30.0, 75.0) == 45.0
    assert pause.stop(60.0, 90.0) == 15.0  # [60, 75) already stopped
    assert pause.stop(80.0, 85.0) == 0.0  # within the downtime so far
    assert pause.stop(100.0, 110.0) == 10.0
    assert pause.until == 110.0


def test_the_source_setting_is_validated_naming_the_key():
    assert DabsParams().source == "hold"  # the spec's default
    with pytest.raises(ValueError, match="source: must be one of queue, hold, drop, pause, got 'halt'"):
        DabsParams(source="halt").validate()
    with pytest.raises(ValueError, match="source"):
        Restart(10.0, True, "x", source="stall")
    assert Restart(10.0, True, "x").source == "queue"  # a bare restart leaves the sources alone


def test_a_gate_closed_with_pause_resumes_the_trace_where_it_stopped(tmp_path):
    """The live provider: a pattern of k + 1 machines at tick k; the gate pauses ticks 3 and 4;
    ticks 5, 6, 7 then read the pattern at ticks 3, 4, 5 (4, 5, 6 machines), and the trace's ticks
    6 and 7 (7, 8 machines) fall after the run's end: 1 + 2 + 3 + 4 + 5 + 6 = 21 machine-ticks."""
    tick_s = 0.48
    cfg = compose_provider(["transport=memory", f"out={tmp_path}", "run_id=unit", "pattern=constant",
                            "pattern.levels=[1,2,3,4,5,6,7,8,9,10]", "pattern.step_minutes=0.008"])
    clock = FakeClock()
    transport = MemoryTransport()
    provider = Provider(make_pattern(cfg.pattern), source_specs(cfg), transport, 1, tick_s * 1000.0, cfg.payloads,
                        clock)
    gate = SourceGate()
    gated = GatedEmit(provider.emit_tick, gate, clock, provider.drop_tick, tick_s)

    def after(result: TickResult) -> None:
        if result.tick.k == 2:
            gate.close("pause")
        if result.tick.k == 4:
            gate.open()

    per_machine = sum(s.items_per_tick for s in source_specs(cfg))
    Emitter(tick_s, 8, gated, clock, on_tick=after).run()
    assert gated.paused_ticks == 2 and gated.held == [] and gated.held_ticks == 0 and gated.dropped_items == 0
    assert provider.load["machines"][::len(provider.sources)] == [1, 2, 3, 4, 5, 6]
    assert sorted(set(provider.load["t_s"])) == [k * tick_s for k in (0, 1, 2, 5, 6, 7)]  # when emitted
    assert sum(provider.items.values()) == 21 * per_machine == len(transport.messages) == sum(provider.load["items"])
    ticks = sorted({int(m.item_id.split("/")[2]) for m in transport.messages})
    assert ticks == [0, 1, 2, 5, 6, 7]
