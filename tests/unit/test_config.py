"""Configuration: composition, the experiment matrix, and errors that name the key."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from testbed.config import ConfigError
from testbed.experiment import plan_runs
from tests import guarded
from tests.conftest import compose_config


def test_default_is_the_paper_matrix_for_stepwise():
    cfg = compose_config()
    specs = plan_runs(cfg)
    assert [(s.config, s.rep) for s in specs[:4]] == [("threshold", 1), ("threshold", 2), ("threshold", 3),
                                                      ("btu-10", 1)]
    assert sorted({s.config for s in specs}) == ["btu-10", "btu-30", "btu-60", "threshold"]
    assert len(specs) == 12
    assert specs[0].run_dir == Path("runs/stepwise/threshold/1")
    assert cfg.duration_min == 120 and cfg.runtime.reasoning_s == 60 and cfg.runtime.monitoring_s == 15
    # repetition r shares its seed across configurations; repetitions differ
    assert {s.seed for s in specs if s.rep == 2} == {specs[1].seed}
    assert specs[0].seed != specs[1].seed


def test_one_configuration_and_top_level_keys():
    cfg = compose_config("policy=btu", "billing.btu_minutes=10", "reps=1", "out=/tmp/x", "pattern=two_level")
    [spec] = plan_runs(cfg)
    assert (spec.config, spec.policy, spec.btu_minutes) == ("btu-10", "btu", 10)
    assert spec.run_dir == Path("/tmp/x/two_level/btu-10/1")
    cfg = compose_config("pattern=two_level", "policies.btu.scaling_threshold=100")
    assert cfg.policies["btu"].scaling_threshold == 100
    [spec] = plan_runs(compose_config("policy=threshold", "reps=1"))
    assert (spec.config, spec.policy, spec.btu_minutes) == ("threshold", "threshold", 60)


def test_evaluation_names_its_configurations_and_defaults():
    cfg = compose_config()
    assert cfg.evaluation.name == "btu" and cfg.profile == "paper_calibrated"  # the calibrated profile by default
    assert [(c.name, c.policy, c.billing.value, c.btu_minutes) for c in cfg.evaluation.configurations] == [
        ("threshold", "threshold", "rebill", None), ("btu-10", "btu", "own", 10), ("btu-30", "btu", "own", 30),
        ("btu-60", "btu", "own", 60)]
    assert cfg.evaluation.workloads == ["stepwise", "two_level", "random_walk_1", "random_walk_2"]
    assert [s.config for s in plan_runs(compose_config("profile=preprint", "reps=1"))] == ["threshold", "btu-10"]
    assert [s.config for s in plan_runs(compose_config("evaluation.only=[btu-30]", "reps=1"))] == ["btu-30"]


def test_paper_values_are_configuration():
    cfg = compose_config("profile=paper")
    ops = cfg.topology.operators
    assert sorted(ops) == [f"O{i}" for i in range(1, 10)]
    assert (ops["O1"].slo_ms, ops["O1"].cpu_shares, ops["O1"].memory_mb, ops["O1"].image_mb) == (1500, 660, 452, 89)
    assert (ops["O9"].ratio_in, ops["O9"].ratio_out) == (300, 1)
    assert ops["O1"].downstream == ["O3", "O4", "O5"]
    assert (cfg.infrastructure.host_cpu_shares, cfg.infrastructure.host_memory_mb) == (4096, 7168)
    assert (cfg.billing.price_per_10_minutes, cfg.billing.penalty_per_item) == (1.0, 0.0001)
    p, b = cfg.policies["threshold"], cfg.policies["btu"]
    assert (p.up_threshold, p.up2_threshold, p.down_threshold) == (50, 250, 1)
    assert (b.scaling_threshold, b.samples, cfg.placement.cache_factor, b.queue_load) == (50, 5, 0.01, 100)


@pytest.mark.parametrize("profile, thresholds",
                         [("paper", (50, 250, 1)), ("preprint", (250, 1000, 1)), ("visp2017", (250, 1250, 20))])
def test_profiles_set_thresholds(profile, thresholds):
    p = compose_config(f"profile={profile}").policies["threshold"]
    assert (p.up_threshold, p.up2_threshold, p.down_threshold) == thresholds


def test_profile_details_and_command_line_wins():
    pre = compose_config("profile=preprint")
    assert (pre.infrastructure.host_cpu_shares, pre.infrastructure.host_memory_mb) == (3072, 5120)
    assert pre.topology.operators["O1"].slo_ms == 900 and pre.runtime.reasoning_s == 20
    visp = compose_config("profile=visp2017", "policies.threshold.down_threshold=5")
    assert visp.runtime.measurement.value == "seconds_truncated" and visp.policies["threshold"].down_threshold == 5


def test_misspelt_key_is_named():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config("policies.btu.scaling_treshold=100")
    assert "scaling_treshold" in str(err.value)


def test_wrong_type_is_named():
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        compose_config("reps=three")
    assert "reps" in str(err.value) or "reps" in str(err.value.__cause__)


def test_unknown_pattern_is_named():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config("pattern=zigzag")
    assert "pattern" in str(err.value) and "zigzag" in str(err.value)


@pytest.mark.parametrize("override, key", [
    ("billing.btu_minutes=0", "billing.btu_minutes"),
    ("reps=0", "reps"),
    ("policies.threshold.up2_threshold=10", "policies.threshold.up2_threshold"),
    ("policies.btu.removal_cap=2", "policies.btu.removal_cap"),
    ("policy.name=nosuch", "policy.name"),
    ("evaluation.only=[btu-7]", "evaluation.only[0]"),
    ("evaluation.configurations.1.policy=nosuch", "evaluation.configurations[1].policy"),
    ("+evaluation.configurations.1.params.samples=0", "evaluation.configurations[1].params.samples"),
    ("+evaluation.configurations.1.params.samplez=3", "evaluation.configurations[1].params"),
    ("placement.name=nosuch", "placement.name"),
    ("infrastructure.lease_delay_s=[60,30]", "infrastructure.lease_delay_s"),
    ("topology.operators.O1.cpu_shares=5000", "topology.operators.O1"),
    ("topology.operators.O2.downstream=[O42]", "topology.operators.O2.downstream"),
    ("topology.operators.O8.downstream=[O1]", "downstream"),
    ("pattern.levels=[]", "pattern.levels"),
])
def test_semantic_errors_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        compose_config(override)
    assert key in str(err.value)


@pytest.mark.slow
def test_cli_rejects_bad_config_before_anything_runs(tmp_path):
    out = tmp_path / "runs"
    proc = guarded.run(
        [sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "billing.btu_minutes=-5"],
        cwd=tmp_path, cpu_s=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.returncode != 0
    assert "billing.btu_minutes" in proc.stderr
    assert not out.exists()
    proc = guarded.run(
        [sys.executable, "-m", "testbed.cli", "experiment", f"out={out}", "polcy=btu"],
        cwd=tmp_path, cpu_s=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.returncode != 0 and "polcy" in proc.stderr
    assert not out.exists()
