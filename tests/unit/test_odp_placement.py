"""ODP as a placement strategy, the T-Storm-like heuristic, the static policy and the network
emulation (docs/papers/odp.md#odp-in-the-testbed). Expected values are worked out in each test."""
from __future__ import annotations

import itertools

import pytest

from testbed.actions import ActionRecord
from testbed.config import ConfigError
from testbed.emulation import AvailabilityMode, EmulationConfig, Emulator, NetworkModel
from testbed.model import (
    HostView,
    InstanceState,
    InstanceView,
    LeaseHost,
    OperatorType,
    OperatorView,
    ScaleUp,
    Snapshot,
)
from testbed.placement.base import make_placement, placement_node
from testbed.placement.first_fit import FirstFit
from testbed.placement.odp.strategy import OdpPlacementConfig
from testbed.placement.records import placements_table
from testbed.plan import Plan
from testbed.policies.static import StaticParams, StaticPolicy
from tests.conftest import compose_config

CPU, MEM = 1024, 1024  # one instance per host of this size


def _types():
    return {o: OperatorType(o, 1000.0, CPU, MEM, 68) for o in ("A", "B")}


def snapshot(t=0.0, hosts=("vm1", "vm2", "vm3"), instances=(), edge_items=None, host_cpu=CPU, views=None):
    types = _types()
    counts = {o: sum(1 for _, op, _ in instances if op == o) for o in types}
    ops = views or {o: OperatorView(types[o], counts[o], 0) for o in types}
    used = {h: sum(1 for _, _, hh in instances if hh == h) for h in hosts}
    hv = tuple(HostView(h, host_cpu, host_cpu, host_cpu - used[h] * CPU, host_cpu - used[h] * MEM, float(k), 3600.0,
                        frozenset(), True, 1.0) for k, h in enumerate(hosts))
    iv = tuple(InstanceView(i, o, h, InstanceState.running, float(k)) for k, (i, o, h) in enumerate(instances))
    return Snapshot(t=t, operators=ops, hosts=hv, instances=iv, btu_s=3600.0, reasoning_s=10.0, penalty=0.0,
                    input_rate=10.0, max_hosts=len(hosts), host_cpu=host_cpu, host_memory=host_cpu,
                    monitoring_s=10.0, edges=(("src", "A"), ("A", "B")), edge_items=edge_items or {})


def odp(emulation: EmulationConfig, **odp_params) -> "object":
    placement = make_placement("odp", placement_node(odp=OdpPlacementConfig(**odp_params)))

    class Run:  # what bind_run reads of a run's config
        class backend:
            pass

    Run.backend.emulation = emulation
    placement.bind_run(Run)
    return placement


def test_odp_minimises_the_response_time_over_the_emulated_delays():
    # provider on vm1, A and B on different hosts (one instance per host): R = d(vm1, a) + d(a, b),
    # enumerated here over the 6 placements with the network's own means
    em = EmulationConfig(seed=3)
    net = NetworkModel(em)
    hosts = ("vm1", "vm2", "vm3")
    best = min((net.mean_delay_ms("vm1", a) + net.mean_delay_ms(a, b), a, b)
               for a, b in itertools.permutations(hosts, 2))
    strategy = odp(em)
    plan = Plan(snapshot())
    actions = strategy.start_many(plan, {"A": 1, "B": 1}, "deploy")
    placed = {a.operator: a.host for a in actions if isinstance(a, ScaleUp)}
    assert placed == {"A": best[1], "B": best[2]}
    run = strategy.runs[-1]
    assert run.status == "optimal" and run.weights == (1.0, 0.0, 0.0)
    assert run.response_time_ms == pytest.approx(best[0])
    assert actions[0].reason.startswith("odp solve 1: optimal")


def test_odp_with_availability_weight_avoids_unavailable_hosts():
    # vm1 at 90 %: with w_a = 1 only vm2 and vm3 keep A = 1 (the provider's vertex is on vm1 either way)
    em = EmulationConfig(availability={"vm2": 0.9})
    strategy = odp(em, w_r=0.0, w_a=1.0)
    actions = strategy.start_many(Plan(snapshot()), {"A": 1, "B": 1}, "deploy")
    assert sorted(a.host for a in actions if isinstance(a, ScaleUp)) == ["vm1", "vm3"]
    assert strategy.runs[-1].availability == pytest.approx(1.0)


def test_existing_instances_are_pinned_unless_reoptimise_all():
    em = EmulationConfig(seed=3)
    existing = (("A-1", "A", "vm3"),)
    pinned = odp(em).start_many(Plan(snapshot(instances=existing)), {"B": 1}, "scale out")
    assert [type(a) for a in pinned] == [ScaleUp]  # A stays on vm3
    net = NetworkModel(em)
    # B goes to the free host with the shortest d(vm3, b) (vm1 or vm2)
    assert pinned[0].host == min(("vm1", "vm2"), key=lambda b: net.mean_delay_ms("vm3", b))


def test_two_step_sodp_reassigns_once_with_the_measured_rates():
    # traffic objective: step one (no rates) solves with w_a = 1; at t >= 100 s with rates a re-solve
    # frees everything; hosts of 2 instances: A and B together with the provider on vm1 give T = 0
    em = EmulationConfig(seed=3)
    strategy = odp(em, w_r=0.0, w_z=1.0, network_objective="traffic", rates_after_s=100.0)
    instances = (("A-1", "A", "vm2"), ("B-2", "B", "vm3"))
    early = strategy.moves(Plan(snapshot(t=50.0, instances=instances, host_cpu=2 * CPU,
                                         edge_items={("src", "A"): 100, ("A", "B"): 100})))
    assert early == []
    plan = Plan(snapshot(t=100.0, instances=instances, host_cpu=2 * CPU,
                         edge_items={("src", "A"): 100, ("A", "B"): 100}))
    moves = strategy.moves(plan)
    assert sorted((m.instance, m.target) for m in moves) == [("A-1", "vm1"), ("B-2", "vm1")]
    assert strategy.runs[-1].network == pytest.approx(0.0) and strategy.runs[-1].weights == (0.0, 0.0, 1.0)
    assert strategy.moves(plan) == []  # once


def test_step_one_uses_availability_weight_without_rates():
    strategy = odp(EmulationConfig(), w_r=0.0, w_z=1.0, network_objective="traffic")
    strategy.start_many(Plan(snapshot()), {"A": 1}, "deploy")
    assert strategy.runs[-1].weights == (0.0, 1.0, 0.0)


def test_odp_leases_only_when_nothing_fits():
    strategy = odp(EmulationConfig())
    snap = snapshot(hosts=("vm1",))
    snap = Snapshot(**{**snap.__dict__, "max_hosts": 2})
    actions = strategy.start_many(Plan(snap), {"A": 1, "B": 1}, "deploy")
    assert [type(a) for a in actions] == [LeaseHost, ScaleUp, ScaleUp]


def test_tstorm_round_robin_then_best_fit_in_traffic_order():
    tstorm = make_placement("tstorm", placement_node(tstorm_first_s=100.0, tstorm_period_s=0.0))
    plan = Plan(snapshot(hosts=("vm1", "vm2", "vm3"), host_cpu=2 * CPU))
    first = tstorm.start_many(plan, {"A": 2, "B": 1}, "deploy")
    assert [a.host for a in first] == ["vm1", "vm2", "vm3"]  # round robin
    # measured: src->A 10/s (5 per A instance), A->B 10/s (5 per pair). Traffic: A-1 10, A-2 10, B 10;
    # ties in start order. A-1 first: vm1 (with the provider, 0 added); A-2: vm1 (0 added, fills
    # vm1); B: 10/s to add anywhere -> best fit: least room left: vm2 and vm3 both leave 1 -> vm2
    instances = (("A-1", "A", "vm1"), ("A-2", "A", "vm2"), ("B-3", "B", "vm3"))
    plan = Plan(snapshot(t=100.0, instances=instances, host_cpu=2 * CPU,
                         edge_items={("src", "A"): 100, ("A", "B"): 100}))
    moves = tstorm.moves(plan)
    assert sorted((m.instance, m.target) for m in moves) == [("A-2", "vm1"), ("B-3", "vm2")]
    assert tstorm.reassignments[-1].traffic_before == pytest.approx(15.0)  # A-2 gets 5 from src, B gets 10
    assert tstorm.reassignments[-1].traffic_after == pytest.approx(10.0)
    assert tstorm.moves(plan) == []  # period 0: once


def test_static_policy_leases_then_places():
    policy = StaticPolicy(StaticParams(hosts=2, instances={"A": 2}), make_placement("first_fit", placement_node()))
    empty = snapshot(hosts=())
    empty = Snapshot(**{**empty.__dict__, "max_hosts": 4})
    assert [type(a) for a in policy.initial_deployment(empty)] == [LeaseHost, LeaseHost]
    placed = policy.initial_deployment(snapshot(hosts=("vm1", "vm2"), host_cpu=4 * CPU))
    assert sorted(a.operator for a in placed) == ["A", "A", "B"]


def test_placements_table_joins_the_solver_run():
    strategy = odp(EmulationConfig())
    actions = strategy.start_many(Plan(snapshot()), {"A": 1}, "deploy")
    records = [ActionRecord(0.0, "lease", None, None, "vm1", None, "x"),
               ActionRecord(0.0, "scale_up", "A", "A-1", actions[0].host, None, actions[0].reason)]
    table = placements_table(records, strategy)
    assert table["instance"] == ["A-1"] and table["solve"] == [1] and table["solver_status"] == ["optimal"]
    assert table["solve_s"] == [strategy.runs[0].solve_s]
    assert placements_table(records, None)["solve"] == [None]


# -- emulation ---------------------------------------------------------------------------------

def test_delays_are_seeded_per_pair_and_within_the_ranges():
    a, b = NetworkModel(EmulationConfig(seed=5)), NetworkModel(EmulationConfig(seed=5))
    pairs = [(f"vm{u}", f"vm{v}") for u in range(1, 9) for v in range(1, 9) if u != v]
    means = [a.mean_delay_ms(*p) for p in pairs]
    assert means == [b.mean_delay_ms(*p) for p in reversed(pairs)][::-1]  # order of asking does not matter
    assert all(12.0 <= m <= 32.0 for m in means) and all(1.0 <= a.sd_delay_ms(*p) <= 3.0 for p in pairs)
    assert a.mean_delay_ms("vm1", "vm1") == 0.0 and a.mean_delay_ms("vm1", "vm2") != a.mean_delay_ms("vm2", "vm1")


def test_delay_draws_are_gaussian_truncated_at_zero():
    em = Emulator(EmulationConfig(delay_mean_ms=[1.0, 1.0], delay_sd_ms=[2.0, 2.0]), seed=1)
    draws = [em.delay_s("vm1", "vm2") * 1000.0 for _ in range(20000)]
    assert min(draws) >= 0.0
    # N(1, 2) truncated at 0: mean = 1 + 2 phi(-0.5) / (1 - Phi(-0.5)) = 1 + 2 * 0.35207 / 0.69146 = 2.0184
    assert sum(draws) / len(draws) == pytest.approx(2.0184, abs=0.05)
    assert em.take_interval()[("vm1", "vm2")][0] == 20000


def test_tuple_mode_loses_one_minus_availability():
    em = Emulator(EmulationConfig(availability={"vm2": 0.9}, link_availability=0.95), seed=2)
    n = 40000
    host = sum(em.host_lost("vm2", 0.0) for _ in range(n)) / n
    link = sum(em.hop_lost("vm1", "vm2") for _ in range(n)) / n
    assert host == pytest.approx(0.1, abs=0.006) and link == pytest.approx(0.05, abs=0.005)
    assert not any(em.host_lost("vm1", 0.0) for _ in range(100)) and not em.hop_lost("vm1", "vm1")


def test_outage_mode_is_down_a_share_of_the_time():
    em = Emulator(EmulationConfig(availability={"vm3": 0.8}, mode=AvailabilityMode.outage, outage_mean_down_s=5.0), 1)
    times = [k * 0.5 for k in range(200000)]  # 100,000 s
    down = sum(em.host_lost("vm3", t) for t in times) / len(times)
    assert down == pytest.approx(0.2, abs=0.02)


def _mean_latency(tmp_path, *extra):
    from testbed.eventlog import EventLog, find_runs
    from testbed.experiment import run_experiment

    cv0 = [f"topology.operators.{o}.service.cv=0" for o in ("T1", "T2", "T3", "T4", "T5", "consumer")]
    run_experiment(compose_config(
        "evaluation=odp", "reps=1", "duration_min=2", "evaluation.only=[odp-r]", f"out={tmp_path}", "summary=false",
        "backend.emulation.delay_mean_ms=[20,20]", "backend.emulation.delay_sd_ms=[0,0]",
        "backend.emulation.availability={}", *cv0, *extra))
    (run,) = find_runs(tmp_path)
    latency = EventLog(run).read("latency").latency_ms
    return latency.min(), latency.max(), EventLog(run).read("placements")


@pytest.mark.slow
def test_emulated_delays_add_to_the_latency(tmp_path):
    # every hop between hosts 20 ms exactly; 6 stages x (5 ms broker hop + 5 ms service) = 60 ms
    # without hops, nothing queues at 10 items/s. Consumer pinned to vm2 (provider on vm1): all 11
    # instances fit on vm1 and vm2 (8 each), the optimum has exactly one hop on every path: 80 ms.
    lo, hi, placements = _mean_latency(tmp_path / "b", "placement.pins={consumer: vm2}")
    assert (lo, hi) == (pytest.approx(80.0, abs=1e-6), pytest.approx(80.0, abs=1e-6))
    assert set(placements.host) == {"vm1", "vm2"} and len(placements) == 11
    # consumer with the provider on vm1: 3 of the 11 must leave vm1, the best worst path makes one
    # round trip (40 ms): 100 ms at most; a path that stays on vm1 takes 60 ms
    lo, hi, _ = _mean_latency(tmp_path / "a")
    assert hi == pytest.approx(100.0,
                               abs=1e-6) and lo in (pytest.approx(60.0, abs=1e-6), pytest.approx(100.0, abs=1e-6))


# -- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [
    ("placement.odp.w_a=0.5", "placement.odp.w_r"),
    ("placement.odp.w_z=1", "placement.odp.w_r"),
    ("placement.odp.solver=cplex", "placement.odp.solver"),
    ("+placement.pins.nope=vm1", "placement.pins.nope"),
    ("placement.pins.consumer=host1", "placement.pins.consumer"),
    ("placement.tstorm_period_s=-1", "placement.tstorm_period_s"),
    ("placement.cache_factor=-0.5", "placement.cache_factor"),
    ("+placement.odp.w_x=1", "placement.odp.w_x"),
    ("+backend.emulation.availability.h1=0.5", "backend.emulation.availability.h1"),
    ("backend.emulation.availability.vm2=0", "backend.emulation.availability.vm2"),
    ("backend.emulation.delay_mean_ms=[30,20]", "backend.emulation.delay_mean_ms"),
])
def test_bad_odp_settings_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=odp", override)
    assert err.value.key == key


def test_bad_configuration_placement_params_name_the_key():
    with pytest.raises(ConfigError) as err:
        compose_config("evaluation=odp", "evaluation.configurations.0.placement_params={odp: {w_r: 2.0}}")
    assert err.value.key.startswith("evaluation.configurations[0].placement_params.odp.w_r")


def test_each_strategy_gets_its_own_typed_parameters_and_the_node_pickles():
    import pickle

    from testbed.placement.base import placement_entries
    from testbed.placement.suitability import SuitabilityParams
    from testbed.placement.tstorm import TStormParams

    cfg = compose_config("evaluation=odp_heuristics")
    entries = placement_entries()
    assert entries["first_fit"].params_of(cfg.placement) is None
    assert isinstance(entries["suitability"].params_of(cfg.placement), SuitabilityParams)
    assert isinstance(entries["tstorm"].params_of(cfg.placement), TStormParams)
    assert isinstance(entries["odp"].params_of(cfg.placement), OdpPlacementConfig)
    assert make_placement("tstorm", cfg.placement).pins == {"consumer": "vm1"}
    again = pickle.loads(pickle.dumps(cfg.placement))
    assert type(again) is type(cfg.placement) and again == cfg.placement


def test_a_strategy_that_would_hide_another_key_is_refused(monkeypatch):
    from dataclasses import dataclass

    from testbed import discovery
    from testbed.placement import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base.placement_entries()))
    monkeypatch.setattr(base, "_classes", {})

    @dataclass
    class Clashing(base.PlacementParams):
        cache_factor: float = 1.0

    @dataclass
    class Untyped:
        x: float = 1.0

    with pytest.raises(discovery.PluginError, match="placement.cache_factor"):
        base.register_placement("elsewhere", Clashing)(lambda params, shared: FirstFit())
    with pytest.raises(discovery.PluginError, match="placement.pins"):
        base.register_placement("elsewhere", Clashing, key="pins")(lambda params, shared: FirstFit())
    with pytest.raises(TypeError, match="derive from PlacementParams"):
        base.register_placement("elsewhere", Untyped)  # type: ignore[arg-type]


def test_placements_table_joins_a_host_for_answer_on_time_operator_and_host():
    # a policy that asks for one host (BTU's upscaling) writes its own reason
    strategy = odp(EmulationConfig())
    plan = Plan(snapshot(t=30.0))
    host = strategy.host_for(plan, plan.types["A"])
    records = [ActionRecord(30.0, "scale_up", "A", "A-7", host, None, "queue 60 > 50"),
               ActionRecord(30.0, "scale_up", "A", "A-8", "vm9", None, "on a new host")]
    table = placements_table(records, strategy)
    assert table["solve"] == [1, None] and table["solver_status"] == ["optimal", None]
