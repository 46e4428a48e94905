"""Operator mode (testbed/policies/operator_mode.py): HPA and Daedalus per operator type on the OEE
topology through the platform's snapshot, in the simulator."""
from __future__ import annotations

import pytest

from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
from testbed.sim.simulator import Simulation
from tests.conftest import compose_config


def _run(config: str, minutes: float):
    cfg = compose_config("evaluation=daedalus_oee", f"evaluation.only=[{config}]", f"duration_min={minutes}", "reps=1",
                         "pattern=two_level")
    spec = plan_runs(cfg)[0]
    run_cfg = config_for(cfg, spec)
    policy = policy_for(run_cfg)
    return policy, Simulation(run_cfg, policy, build_pattern(run_cfg.pattern, cfg.seed), spec.seed,
                              spec.btu_minutes).run()


def test_hpa_scales_operators_by_their_instances_busy_fraction():
    policy, result = _run("hpa-80", 20)
    acts = result.tables["actions"]
    ups = [(o, r) for a, o, r in zip(acts["action"], acts["operator"], acts["reason"], strict=True) if a == "scale_up"
           and "hpa-80" in r]
    assert ups, "the load step to 8 machines must make HPA scale some operator out"
    assert set(policy.states) == set(result.tables["instances"]["operator"])  # one HPA per operator type


@pytest.mark.slow
def test_daedalus_keeps_one_controller_per_operator_and_books_its_forecasts():
    policy, result = _run("daedalus", 12)
    assert set(policy.controllers) == set(result.tables["instances"]["operator"])
    loops = result.tables["forecasts"]  # the controllers' own tables go into the event log
    assert len(loops["t_s"]) == 9 * 12  # nine operators, one loop a minute for 12 minutes
    assert set(loops["controller"]) == set(policy.controllers)
