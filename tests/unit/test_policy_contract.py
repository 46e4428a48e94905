"""The policy contract: a policy in a module outside the testbed's package is found by the registry
(named in TESTBED_POLICY_MODULES, nothing else edited), selectable as `policy=<name>`, runs in a
simulated evaluation and in simulated job mode, and has the times its parameter dataclass declares
compressed by live job mode; job-mode scaling targets realised once; the built-ins' time fields."""
from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass

import pytest

from testbed import discovery
from testbed.eventlog import EventLog, read_manifest
from testbed.experiment import config_for, plan_runs, run_experiment
from testbed.live import job_compression
from testbed.live.job_compression import compress_config
from testbed.model import ScaleDown, ScaleTo, ScaleUp
from testbed.policies import registry
from testbed.policies.contract import Policy, time_field, time_fields
from testbed.policies.daedalus.policy import DaedalusParams
from testbed.policies.ds2 import Ds2Params
from testbed.policies.flink_autoscaler import FlinkAutoscalerParams
from testbed.policies.hpa import HpaParams
from testbed.policies.job_inputs import JOB_OPERATOR
from testbed.policies.registry import register_policy
from testbed.policies.scaling import job_rescale
from tests.conftest import compose_config

MODULE = "outside_step_policy"
SOURCE = '''
"""A policy kept outside the testbed's package: every operator (or the job) to `replicas` once
`after_s` has passed."""
from dataclasses import dataclass

from testbed.plan import Plan
from testbed.policies.contract import Policy, time_field
from testbed.policies.job_inputs import JOB_OPERATOR
from testbed.policies.registry import register_policy
from testbed.policies.scaling import realise, target_of


@dataclass
class StepParams:
    replicas: int = 3
    after_s: float = time_field(120.0)
    period_s: int = time_field(30)  # job mode: seconds between decisions
    label: str = "step"


@register_policy("outside_step", StepParams)
class StepPolicy(Policy):
    def __init__(self, params, placement):
        self.params, self.placement = params, placement
        self.interval_s = float(params.period_s)

    def decide(self, snapshot):
        if snapshot.t < self.params.after_s:
            return []
        plan, actions = Plan(snapshot), []
        for o in snapshot.operators:
            target = target_of(o, plan.n[o], self.params.replicas, self.params.label)
            if target is not None:
                actions += realise(plan, target, self.placement)
        return actions

    def decide_job(self, snapshot):
        if snapshot.t < self.params.after_s:
            return []
        target = target_of(JOB_OPERATOR, snapshot.parallelism, self.params.replicas, self.params.label)
        return [] if target is None else [target]
'''


@pytest.fixture
def outside_policy(tmp_path, monkeypatch):
    """The module written to a folder on the Python path and named in the environment; the
    registry and the module cache are restored afterwards."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.policies()))  # restored after the test
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(registry.MODULES_VARIABLE, MODULE)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield tmp_path
    sys.modules.pop(MODULE, None)


def test_an_outside_policy_runs_in_a_simulated_evaluation(outside_policy):
    assert "outside_step" in registry.policies()
    cfg = compose_config("policy=outside_step", "reps=1", "duration_min=10", f"out={outside_policy / 'runs'}",
                         "summary=false", "workers=1", "policies.outside_step.after_s=240")
    [run] = run_experiment(cfg)
    manifest = read_manifest(run)
    assert (manifest.policy, manifest.config, manifest.billing, manifest.status) == (
        "outside_step", "outside_step", "rebill", "complete")
    instances = EventLog(run).read("instances")
    before, after = instances[instances.t_s < 240], instances[instances.t_s > 400]
    assert (before.instances < 3).all() and (after.instances == 3).all()  # the initial deployment, then 3
    actions = EventLog(run).read("actions")
    assert set(actions[actions.reason == "step"].action) == {"scale_up"}


def test_an_outside_policy_runs_in_simulated_job_mode(outside_policy):
    cfg = compose_config("evaluation=daedalus", "policy=outside_step", "reps=1", "duration_min=10",
                         f"out={outside_policy / 'runs'}", "summary=false", "workers=1",
                         "policies.outside_step.replicas=5", "policies.outside_step.after_s=300")
    [run] = run_experiment(cfg)
    assert read_manifest(run).status == "complete"
    rescales = EventLog(run).read("rescales")
    assert list(zip(rescales.t_s, rescales.from_n, rescales.to_n, strict=True)) == [(300.0, 12, 5)]
    actions = EventLog(run).read("actions")
    down = actions[actions.action == "scale_down"]
    assert list(down.instance) == [f"w{i}" for i in range(11, 4, -1)]  # the newest workers first


def test_live_job_compression_reads_the_outside_policys_time_fields(outside_policy):
    cfg = compose_config("evaluation=daedalus", "policy=outside_step", "reps=1", "duration_min=60")
    run_cfg = config_for(cfg, plan_runs(cfg)[0])
    params = run_cfg.policies["outside_step"]
    assert time_fields(params) == ("after_s", "period_s")
    changed = compress_config(run_cfg, 6.0)
    assert changed["policies.outside_step"] == {"after_s": [120.0, 20.0], "period_s": [30, 5]}
    assert (params.replicas, params.label) == (3, "step")  # not times: unchanged
    assert not hasattr(job_compression, "POLICY_TIMES")  # no side table


def test_an_outside_policy_found_by_its_entry_point(tmp_path, monkeypatch):
    """An installed distribution's entry point (group testbed.policies) names the module."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    info = folder / "outside_step-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-step\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\noutside_step = {MODULE}\n")
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.policies()))  # restored after the test
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv(registry.MODULES_VARIABLE, raising=False)
    monkeypatch.setattr(discovery, "_entry_points", {})  # the installed distributions are read once per process
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    try:
        assert registry.policy_entry("outside_step").params.__module__ == MODULE
    finally:
        sys.modules.pop(MODULE, None)


def test_the_built_in_time_fields():
    assert set(time_fields(HpaParams)) == {
        "sync_s", "metric_window_s", "up_window_s", "down_window_s", "policy_period_s", "up_percent_period_s",
        "up_pods_period_s", "down_percent_period_s", "down_pods_period_s"}
    assert set(time_fields(DaedalusParams)) == {
        "loop_s", "rt_target_s", "grace_s", "keep_s", "warmup_s", "horizon_s", "downtime_out_s", "downtime_in_s",
        "fast_history_s", "fallback_horizon_s", "K", "post_rescale_pause_s"}
    assert set(time_fields(Ds2Params)) == {"policy_interval_s", "warm_up_s"}
    assert set(time_fields(FlinkAutoscalerParams)) == {
        "metrics_window_s", "stabilization_s", "catch_up_s", "restart_time_s", "restart_time_tracking_limit_s",
        "backlog_lag_threshold_s", "scale_down_interval_s", "interval_s"}
    for name, entry in registry.policies().items():
        if name not in ("hpa", "daedalus", "ds2", "flink_autoscaler"):
            assert time_fields(entry.params) == (), name


def test_every_built_in_policy_is_found_and_offered_as_an_option():
    assert set(registry.policies()) >= {"btu", "dabs", "daedalus", "ds2", "flink_autoscaler", "hpa", "presps",
                                        "static", "static_n", "threshold"}
    for name in registry.policies():
        assert compose_config(f"policy={name}", "reps=1").policy.name == name


def test_job_rescale_realises_a_target_once():
    up = job_rescale(2, [ScaleTo(JOB_OPERATOR, 4, "more")], top=18)
    assert up == (4, [ScaleUp(JOB_OPERATOR, JOB_OPERATOR, "more")] * 2)
    down = job_rescale(4, [ScaleTo(JOB_OPERATOR, 1, "less")], top=18)
    assert down == (1, [ScaleDown(JOB_OPERATOR, f"w{i}", JOB_OPERATOR, "less") for i in (3, 2, 1)])
    # clamped into [1, top]; the records say what the policy asked for
    assert job_rescale(16, [ScaleTo(JOB_OPERATOR, 20, "x")], top=18)[0] == 18
    assert job_rescale(18, [ScaleTo(JOB_OPERATOR, 20, "x")], top=18) is None
    assert job_rescale(3, [ScaleTo(JOB_OPERATOR, 3, "same")], top=18) is None
    assert job_rescale(3, [], top=18) is None
    with pytest.raises(TypeError):
        job_rescale(3, [ScaleUp(JOB_OPERATOR, JOB_OPERATOR, "per worker")], top=18)


def test_a_policy_must_subclass_the_contract(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.policies()))  # restored after the test

    @dataclass
    class NoParams:
        pass

    with pytest.raises(TypeError, match="must subclass"):
        register_policy("not_a_policy", NoParams)(type("Plain", (), {}))

    @register_policy("null_policy", NoParams)
    class Null(Policy):
        def __init__(self, params, placement):
            self.placement = placement

    policy = Null(NoParams(), None)  # every hook has a null default
    assert (policy.decide_job(None), policy.initial_deployment(None), policy.initial_parallelism(18),
            policy.records(), policy.run_details(), policy.interval_s) == ([], None, None, {}, None, None)


def test_a_time_field_keeps_its_metadata():
    @dataclass
    class P:
        t_s: float = time_field(10.0, metadata={"unit": "s"})

    [f] = P.__dataclass_fields__.values()
    assert f.metadata["unit"] == "s" and time_fields(P) == ("t_s",)
