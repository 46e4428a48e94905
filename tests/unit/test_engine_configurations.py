"""Every configuration of the evaluations on a real engine (`daedalus_flink` on Flink, `daedalus_live`
on the Docker job runner) gets its policy's times compressed by the evaluation's time compression,
the same way for every policy: each parameter whose name says it is a time is declared one
(`time_field`) and arrives divided by f, every other parameter as configured. A time-valued
parameter added to a policy without `time_field` fails here."""
from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import pytest

from testbed.config import policy_params
from testbed.experiment import config_for, configuration_of, plan_runs, time_compression
from testbed.live.job_compression import scaled
from testbed.policies import registry
from testbed.policies.contract import Policy, is_time
from tests.conftest import compose_config

ENGINES = ("daedalus_flink", "daedalus_live")
# a parameter's name that says it is a time: a unit suffix or a word for a span of time
TIME_NAME = re.compile(r"(_s|_ms|_min|_minutes)$|interval|window|period|duration|delay|timeout|warm_?up|horizon")


def time_named(name: str, default: Any) -> bool:
    return TIME_NAME.search(name) is not None and isinstance(default, (int, float)) and not isinstance(default, bool)


def job_mode_policies() -> list:
    """The registered policies that decide in job mode (the ones an engine evaluation can run)."""
    return [name for name, entry in registry.policies().items()
            if getattr(entry.cls, "decide_job", Policy.decide_job) is not Policy.decide_job]


@pytest.mark.parametrize("name", job_mode_policies())
def test_every_time_named_parameter_of_a_job_mode_policy_is_declared_a_time(name):
    params = registry.policy_entry(name).params()
    undeclared = [f.name for f in fields(params) if time_named(f.name, getattr(params, f.name)) and not is_time(f)]
    assert undeclared == [], f"{name}: time-valued parameters that job mode would not compress: {undeclared}"


def test_the_practitioners_autoscalers_are_configurations_of_both_engine_evaluations():
    for evaluation in ENGINES:
        cfg = compose_config(f"evaluation={evaluation}", "reps=1")
        policies = {c.name: c.policy for c in cfg.evaluation.configurations}
        assert policies["ds2"] == "ds2" and policies["flink_autoscaler"] == "flink_autoscaler", evaluation


@pytest.mark.parametrize("evaluation", ENGINES)
def test_every_configuration_has_its_times_compressed_and_nothing_else(evaluation, tmp_path):
    cfg = compose_config(f"evaluation={evaluation}", "reps=1", f"out={tmp_path}")
    specs = plan_runs(cfg)
    assert {s.policy for s in specs} >= {"ds2", "flink_autoscaler", "daedalus", "hpa"}
    for spec in specs:
        conf = configuration_of(cfg, spec)
        paper = policy_params(cfg, conf.policy, conf.params)  # as configured: the paper's times
        run = config_for(cfg, spec)
        f = time_compression(run)
        assert f > 1, evaluation
        live = run.policies[conf.policy]
        compressed = set()
        for fld in fields(live):
            before, after = getattr(paper, fld.name), getattr(live, fld.name)
            if is_time(fld):
                assert after == scaled(before, f), (spec.config, fld.name, before, after)
                compressed.add(fld.name)
            else:
                assert after == before, (spec.config, fld.name, before, after)
        assert compressed == {fld.name for fld in fields(live) if time_named(fld.name, getattr(paper, fld.name))
                              or is_time(fld)}, spec.config


@pytest.mark.parametrize("evaluation", ENGINES)
def test_ds2_and_the_flink_autoscaler_at_their_defaults_divided_by_f(evaluation, tmp_path):
    cfg = compose_config(f"evaluation={evaluation}", "reps=1", f"out={tmp_path}",
                         "evaluation.only=[ds2,flink_autoscaler]")
    runs = {configuration_of(cfg, s).name: config_for(cfg, s) for s in plan_runs(cfg)}
    f = time_compression(runs["ds2"])
    d = runs["ds2"].policies["ds2"]
    assert (d.policy_interval_s, d.warm_up_s) == pytest.approx((10 / f, 20 / f))
    a = runs["flink_autoscaler"].policies["flink_autoscaler"]
    assert (a.metrics_window_s, a.stabilization_s, a.catch_up_s, a.restart_time_s, a.restart_time_tracking_limit_s,
            a.backlog_lag_threshold_s, a.scale_down_interval_s, a.interval_s) == pytest.approx(
        tuple(v / f for v in (900, 300, 1800, 300, 900, 300, 3600, 10)))
    assert (a.target_utilisation, a.max_scale_down_factor, a.key_groups) == (0.7, 0.6, 128)  # not times
