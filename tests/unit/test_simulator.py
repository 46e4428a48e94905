"""Dynamics of simulated runs and reproducibility of their event logs."""
from __future__ import annotations

from typing import List, Tuple

import pandas as pd
import pytest

from testbed.eventlog import EventLog, read_manifest
from testbed.experiment import build_pattern, config_for, execute, plan_runs, policy_for
from testbed.model import Action, ReleaseHost, Snapshot
from testbed.policies.btu import release_window
from testbed.policies.contract import Policy
from testbed.sim.simulator import Simulation
from tests.conftest import compose_config


class Recording(Policy):
    """Wraps a policy and keeps every snapshot it saw with the actions it returned."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.calls: List[Tuple[Snapshot, List[Action]]] = []

    def decide(self, snapshot: Snapshot) -> List[Action]:
        actions = self.inner.decide(snapshot)
        self.calls.append((snapshot, actions))
        return actions


def simulate(*overrides: str, seed: int = 7):
    cfg = compose_config("reps=1", *overrides)
    [spec] = plan_runs(cfg)
    run_cfg = config_for(cfg, spec)
    policy = Recording(policy_for(run_cfg))
    pattern = build_pattern(run_cfg.pattern, cfg.seed)
    result = Simulation(run_cfg, policy, pattern, seed, spec.btu_minutes).run()
    return result, policy, run_cfg


@pytest.fixture(scope="module")
def btu_run():
    return simulate("policy=btu", "billing.btu_minutes=10", "pattern=two_level", "duration_min=40")


@pytest.fixture(scope="module")
def threshold_run():
    return simulate("policy=threshold", "billing.btu_minutes=10", "pattern=two_level", "duration_min=40")


def frame(result, table: str) -> pd.DataFrame:
    return pd.DataFrame(result.tables[table])


@pytest.mark.parametrize("run", ["btu_run", "threshold_run"])
def test_instances_rise_under_a_load_step(run, request):
    result, _, _ = request.getfixturevalue(run)
    inst = frame(result, "instances")
    o1 = inst[inst.operator == "O1"].set_index("t_s")["instances"]
    low = o1[o1.index < 8 * 60].max()  # two_level: 2 machines for 8 min, then 8
    high = o1[(o1.index > 10 * 60) & (o1.index < 16 * 60)].max()
    assert high > low


@pytest.mark.parametrize("run", ["btu_run", "threshold_run"])
def test_no_host_is_ever_overcommitted(run, request):
    _, policy, _ = request.getfixturevalue(run)
    assert policy.calls
    for snapshot, _ in policy.calls:
        for host in snapshot.hosts:
            assert host.cpu_free >= 0 and host.memory_free >= 0, (snapshot.t, host)


def test_btu_policy_releases_only_inside_the_release_window(btu_run):
    _, policy, cfg = btu_run
    releases = 0
    for snapshot, actions in policy.calls:
        window = release_window(cfg.policies["btu"], snapshot.btu_s, snapshot.reasoning_s)
        for a in actions:
            if isinstance(a, ReleaseHost):
                releases += 1
                remaining = snapshot.host(a.host).btu_end - snapshot.t
                assert 0 < remaining <= window, (snapshot.t, a)
    assert releases > 0, "the scenario should see at least one release"


def test_threshold_policy_releases_an_empty_host_at_once(threshold_run):
    result, policy, _ = threshold_run
    for snapshot, actions in policy.calls:
        released = {a.host for a in actions if isinstance(a, ReleaseHost)}
        for host in snapshot.hosts:
            if not snapshot.instances_on(host.id) and not host.releasing:
                assert host.id in released, (snapshot.t, host.id)
    leases = frame(result, "leases")
    assert leases.released.any(), "the load drop should empty and release a host"


@pytest.mark.parametrize("run", ["btu_run", "threshold_run"])
def test_every_paid_btu_is_in_leases(run, request):
    result, _, cfg = request.getfixturevalue(run)
    actions, leases = frame(result, "actions"), frame(result, "leases")
    assert (leases.btu_s == cfg.billing.btu_minutes * 60).all()
    assert sorted(leases.host) == sorted(actions[actions.action == "lease"].host)
    for _, lease in leases.iterrows():
        prolongs = ((actions.action == "prolong") & (actions.host == lease.host)).sum()
        assert lease.prolongations == prolongs
        # each lease pays its first BTU, each prolongation one more; nothing is paid twice
        assert lease.paid_btus == max(1 + prolongs, -(-(lease.end_s - lease.start_s - 1e-6) // lease.btu_s))
    if run == "btu_run":
        released = leases[leases.released]
        assert (released.paid_btus == 1 + released.prolongations).all()


def test_items_are_conserved(btu_run):
    """What the provider emitted is processed by the entry operators or still queued."""
    result, _, _ = btu_run
    load, processed, queues = frame(result, "load"), frame(result, "processed"), frame(result, "queues")
    emitted = load.groupby("source")["items"].sum()
    last = queues[queues.t_s == queues.t_s.max()].set_index("operator")["depth"]
    done = processed.groupby("operator")["items"].sum()
    # the final tick may be emitted after the last monitoring read
    for source, op in (("S1_availability", "O2"), ("S2_production", "O1"), ("S3_temperature", "O6")):
        assert 0 <= emitted[source] - done[op] - last[op] <= load[load.source == source]["items"].iloc[-1]


def test_same_seed_same_event_log_other_seed_different(tmp_path):
    def run(out, seed):
        cfg = compose_config("policy=btu", "reps=1", "duration_min=15", f"out={out}", f"seed={seed}")
        [spec] = plan_runs(cfg)
        return execute(cfg, spec)

    a, b, c = run(tmp_path / "a", 3), run(tmp_path / "b", 3), run(tmp_path / "c", 4)
    written = sorted(f.name for f in a.glob("*.parquet"))  # a policy's own tables are written only by it
    assert written == sorted(f.name for f in b.glob("*.parquet")) and len(written) >= 8
    for name in written:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert read_manifest(a).status == "complete"
    config_a, config_b = read_manifest(a).resolved_config, read_manifest(b).resolved_config
    assert config_a.pop("out") != config_b.pop("out") and config_a == config_b
    differs = [t for t in ("samples", "actions") if not EventLog(a).read(t).equals(EventLog(c).read(t))]
    assert differs == ["samples", "actions"]


def test_interrupted_run_is_marked_incomplete(tmp_path, monkeypatch):
    from testbed.sim import simulator

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(simulator.Simulation, "run", interrupted)
    cfg = compose_config("policy=btu", "reps=1", f"out={tmp_path}")
    [spec] = plan_runs(cfg)
    with pytest.raises(KeyboardInterrupt):
        execute(cfg, spec)
    manifest = read_manifest(spec.run_dir)
    assert manifest.status == "incomplete" and manifest.error == "interrupted (SIGINT)"  # says it was interrupted
