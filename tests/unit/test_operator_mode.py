"""Operator mode (testbed/policies/operator_mode.py): HPA and Daedalus per operator type on the OEE
topology through the platform's snapshot, in the simulator."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from testbed.experiment import build_pattern, config_for, plan_runs, policy_for
from testbed.policies.operator_mode import WINDOW_S, _window
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


def _expanded(buf, since_rescale):
    """Every sample held over its span, the whole buffer, then its last WINDOW_S seconds: what the
    window means, built the long way."""
    seconds, workload, uptime, rows = [], [], [], {}
    for ts, span, w, per, _lag in buf:
        k = int(round(span))
        for j in range(k):
            s = ts - (k - 1 - j)
            for inst, values in per.items():
                rows.setdefault(inst, {})[len(seconds)] = values
            seconds.append(s)
            workload.append(w)
            uptime.append(max(0.0, s - since_rescale))
    lo = max(0, len(seconds) - WINDOW_S)
    thr = {i: np.array([r.get(x, (0.0, np.nan))[0] for x in range(len(seconds))])[lo:] for i, r in rows.items()}
    cpu = {i: np.array([r.get(x, (0.0, np.nan))[1] for x in range(len(seconds))])[lo:] for i, r in rows.items()}
    return np.array(seconds[lo:]), np.array(workload[lo:]), thr, cpu, np.array(uptime[lo:])


@pytest.mark.parametrize("spans", [[15.0] * 40, [15.0, 5.0, 0.4, 20.0, 7.6, 30.0], [0.4, 15.0, 15.0], [15.0, 15.0], [],
                                   [70.0, 3.0]])
def test_the_window_is_the_last_seconds_of_every_sample_held_over_its_span(spans):
    rng = np.random.default_rng(len(spans))
    buf, t = deque(), 0.0
    for k, span in enumerate(spans):
        t += span
        # instances come and go: 'O1-0' and 'O1-1' only at the start, so they have no value in a long
        # buffer's window ('O1-0' none at all behind a span of under half a second)
        names = [f"O1-{k}"] if k < 2 else [f"O1-{2 + (k % 3)}", "O1-9"]
        per = {n: (float(rng.integers(0, 50)), float(rng.random())) for n in names}
        buf.append((t, span, float(rng.integers(0, 500)), per, 0.0))
    got, want = _window(buf, t, t - 100.0), _expanded(buf, t - 100.0)
    for a, b in zip(got[:2] + got[4:], want[:2] + want[4:], strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    for ours, theirs in zip(got[2:4], want[2:4], strict=True):
        assert list(ours) == list(theirs)  # every instance of the buffer, in order of first appearance
        assert all(ours[i].tobytes() == theirs[i].tobytes() for i in ours)
