"""The four-paper platform in the simulator: the observation tables on a hand-checkable chain, pool
activation, the stop-the-world restart with purge, and a policy registered by a test alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import pandas as pd
import pytest

from testbed.config import OperatorConfig, ServiceConfig, SourceConfig, TopologyConfig
from testbed.eventlog import EventLog, read_manifest
from testbed.experiment import build_pattern, config_for, plan_runs, run_experiment
from testbed.model import Action, Restart, ScaleUp, SetActive, Snapshot
from testbed.policies import registry
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy
from testbed.sim.simulator import Simulation
from tests.conftest import compose_config

# A chain S -> A -> B: 10 items per 0.5 s tick per machine, 2 machines = 40 items/s.
# A serves an item in 100 ms, so one instance (10/s) is saturated; B in 10 ms (40/s: 40 % busy).
CHAIN = TopologyConfig(
    name="chain", tick_ms=500, compliance_excluded=[],
    sources={"S": SourceConfig(items_per_tick=10, downstream=["A"])},
    operators={
        "A": OperatorConfig(slo_ms=1000, cpu_shares=512, memory_mb=512, downstream=["B"],
                            service=ServiceConfig(mean_ms=100, cv=0.0)),
        "B": OperatorConfig(slo_ms=1000, cpu_shares=512, memory_mb=512, service=ServiceConfig(mean_ms=10, cv=0.0)),
    },
)


class Scripted(Policy):
    """Returns the actions given for a reasoning time, and keeps what it saw."""

    name = "scripted"

    def __init__(self, script):
        self.script = script
        self.seen: List[Snapshot] = []

    def decide(self, snapshot: Snapshot) -> List[Action]:
        self.seen.append(snapshot)
        return self.script(snapshot)


def run_chain(script, minutes: float = 5.0, machines: int = 2):
    cfg = compose_config("policy=threshold", "reps=1", "profile=paper", "pattern=constant",
                         f"pattern.levels=[{machines}]", f"duration_min={minutes}", "runtime.reasoning_s=30",
                         "runtime.monitoring_s=15", "backend.hop_latency_ms=0", "runtime.sample_every=1",
                         "backend.step_ms=500")
    cfg.topology = CHAIN
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    policy = Scripted(script)
    result = Simulation(run_cfg, policy, build_pattern(run_cfg.pattern, cfg.seed), 3, spec.btu_minutes).run()
    return {k: pd.DataFrame(v) for k, v in result.tables.items()}, policy


def test_observation_tables_on_a_chain():
    tables, policy = run_chain(lambda s: [])
    edges, processed, stats = tables["edges"], tables["processed"], tables["instance_stats"]
    assert set(zip(edges.source, edges.target, strict=True)) == {("S", "A"), ("A", "B")}
    # every interval: 15 s x 40 items/s enter A
    assert (edges[edges.source == "S"]["items"] == 600).all()
    # per-edge counts sum to what the receiving operator got: B receives what A processed (selectivity 1)
    a_done = processed[processed.operator == "A"].set_index("t_s")["items"]
    a_to_b = edges[edges.source == "A"].set_index("t_s")["items"]
    assert a_to_b.sum() == a_done.sum()
    # A's single instance is saturated: about 150 items per 15 s and busy all the time
    a_stats = stats[stats.operator == "A"]
    assert a_stats.instance.nunique() == 1
    assert a_stats["processed"].iloc[1:].between(149, 151).all()
    assert a_stats["utilisation"].iloc[1:].between(0.99, 1.0).all()
    # B: 10 items/s x 10 ms = 10 % busy, its processed count equals the operator's
    b_stats = stats[stats.operator == "B"]
    assert b_stats["utilisation"].iloc[1:].between(0.09, 0.11).all()
    assert b_stats["processed"].sum() == processed[processed.operator == "B"]["items"].sum()
    # nothing dropped; end-to-end latency samples at the sink B grow with A's queue
    assert tables["dropped"].empty
    lat = tables["latency"]
    assert set(lat.operator) == {"B"} and lat.latency_ms.iloc[-1] > lat.latency_ms.iloc[0] >= 110.0
    # the snapshot shows the interval's counts and the bounded input-rate history
    last = policy.seen[-1]
    assert last.t == 270 and last.input_rates == (40.0,) * 18  # one rate per monitoring interval so far
    assert last.edge_items[("S", "A")] == 600 and last.operators["A"].received == 600
    assert last.operators["A"].utilisation == pytest.approx(1.0, abs=0.01)


def test_pool_activation_only_active_replicas_process():
    def script(s: Snapshot) -> List[Action]:
        if s.t == 30:  # a pool of 4 pre-started replicas of A, 2 of them switched on
            return [ScaleUp("A", s.hosts[0].id, "pool")] * 3 + [SetActive("A", 2, "two on")]
        if s.t == 150:
            return [SetActive("A", 4, "all on")]
        return []

    tables, policy = run_chain(script, minutes=5)
    stats, actions = tables["instance_stats"], tables["actions"]
    switched = actions[actions.action.isin(["activate", "deactivate"])]
    assert list(switched.action) == ["deactivate", "deactivate", "activate", "activate"]
    inactive = set(switched.instance[:2])
    # an inactive replica holds and processes nothing while switched off
    before = stats[(stats.t_s > 60) & (stats.t_s <= 150)]
    assert not before[before.instance.isin(inactive)]["processed"].any()
    assert before[~before.instance.isin(inactive) & (before.operator == "A")]["processed"].sum() > 0
    after = stats[(stats.t_s > 195) & (stats.operator == "A")]
    assert after.groupby("instance")["processed"].sum().gt(0).sum() == 4
    assert policy.seen[-1].operators["A"].n == 4 and policy.seen[-1].operators["A"].active is None
    mid = next(s for s in policy.seen if s.t == 120)
    assert mid.operators["A"].active == 2 and mid.operators["A"].n == 4


def test_restart_with_purge_drops_exactly_the_queue():
    def script(s: Snapshot) -> List[Action]:
        return [Restart(45.0, True, "rescale")] if s.t == 90 else []

    tables, policy = run_chain(script, minutes=5)
    at_restart = next(s for s in policy.seen if s.t == 90)
    dropped = tables["dropped"]
    assert list(dropped.reason.unique()) == ["purge"]
    assert dropped.groupby("operator")["items"].sum().to_dict() == {
        o: v.queue for o, v in at_restart.operators.items() if v.queue}
    processed = tables["processed"]
    assert not processed[(processed.t_s > 90) & (processed.t_s <= 135)]["items"].any()  # the downtime
    assert processed[processed.t_s > 150]["items"].sum() > 0
    # every item is accounted for: received = processed + dropped + still queued
    received = tables["edges"].groupby("target")["items"].sum()
    queues = tables["queues"].groupby("operator")["depth"].last()
    for o in ("A", "B"):
        done = processed[processed.operator == o]["items"].sum()
        assert received[o] == done + dropped[dropped.operator == o]["items"].sum() + queues[o]
    restart = tables["actions"].query("action == 'restart'")
    assert len(restart) == 1 and "downtime 45 s" in restart.reason.iloc[0]


@dataclass
class FixedParams:
    replicas: int = 2


def test_a_policy_registered_by_a_test_runs_through_an_evaluation(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.policies()))  # restored after the test

    @register_policy("example_fixed", FixedParams, billing="rebill")
    class FixedReplicas(Policy):
        """Keeps every operator at `replicas` instances (the configured placement decides where)."""

        def __init__(self, params: FixedParams, placement):
            self.params, self.placement = params, placement

        def decide(self, snapshot: Snapshot) -> List[Action]:
            from testbed.plan import Plan
            from testbed.policies.scaling import scale_to

            plan = Plan(snapshot)
            return [a for o in snapshot.operators
                    for a in scale_to(plan, o, self.params.replicas, self.placement, "fixed")]

    cfg = compose_config("reps=1", "duration_min=10", f"out={tmp_path}", "summary=false", "workers=1",
                         "+evaluation.configurations.0.params.replicas=3",
                         "evaluation.configurations.0.name=fixed-3", "evaluation.configurations.0.policy=example_fixed",
                         "evaluation.only=[fixed-3]")
    [run] = run_experiment(cfg)
    manifest = read_manifest(run)
    assert (manifest.policy, manifest.config, manifest.billing, manifest.status) == (
        "example_fixed", "fixed-3", "rebill", "complete")
    instances = EventLog(run).read("instances")
    assert (instances.groupby("operator")["instances"].last() == 3).all()
    assert manifest.resolved_config["placement"]["name"] == "first_fit"
