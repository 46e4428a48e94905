"""The original implementation's BTU rules (profile visp2017): its upscaling trigger and the
prolongation of due hosts while a recently leased host is young. Numbers worked out by hand."""
from __future__ import annotations

import pytest

from testbed.model import ProlongHost, ScaleUp
from testbed.policies.btu import BtuParams, BtuPolicy, TriggerVariant, visp_upscaling_trigger
from tests.unit.policy_fixtures import World, kinds


@pytest.mark.parametrize("durations, queue, up, instances", [
    ((1000.0,) * 5, 300, True, 2),   # mean 1000 > 700 and queue 300 > 250: two instances
    ((1000.0,) * 5, 60, True, 1),    # mean above the SLO, queue 60 > 50
    ((400.0,) * 5, 100, False, 1),   # mean 400; through origin 6*400*15/55 = 654.5 < 700
    ((500.0,) * 5, 60, True, 1),     # through origin 6*500*15/55 = 818.2 > 700, queue 60 > 50
    ((500.0,) * 5, 40, False, 1),    # queue 40 is not > 50
    ((400.0,) * 5, 300, True, 1),    # queue 300 > 250 alone, the mean is fast: one instance
    ((), 300, True, 1),              # no duration yet: the long queue alone
    ((), 100, False, 1),
])
def test_visp_trigger(durations, queue, up, instances):
    t = visp_upscaling_trigger(durations, slo=700.0, queue=queue, scaling_threshold=50, queue_alone=250)
    assert (t.up, t.instances) == (up, instances)


def test_through_origin_prediction_weights_recent_samples():
    # (n+1) * sum(i d_i) / sum(i^2) = 6 * (100 + 200 + 300 + 400 + 5000) / 55 = 654.5
    t = visp_upscaling_trigger((100.0, 100.0, 100.0, 100.0, 1000.0), 700.0, 0, 50, 250)
    assert t.predicted == pytest.approx(6 * 6000 / 55) and t.duration == pytest.approx(280.0)


def test_policy_starts_two_instances_on_a_slow_operator_with_a_long_queue():
    w = World(t=1000.0)
    w.op("A", cpu=512, memory=1024, slo_ms=700, queue=300, durations=(1000.0,) * 5)
    w.host("h1", "A")
    cfg = BtuParams(trigger_variant=TriggerVariant.visp2017)
    actions = BtuPolicy(cfg).decide(w.snapshot())
    assert kinds(actions) == ["scale_up", "scale_up"] and all(isinstance(a, ScaleUp) for a in actions)
    paper = BtuPolicy(BtuParams()).decide(w.snapshot())
    assert kinds(paper) == ["scale_up"]  # Algorithm 1 starts one


@pytest.mark.parametrize("young_age, prolonged", [(100.0, True), (200.0, False)])
def test_due_host_prolonged_while_a_recent_lease_is_young(young_age, prolonged):
    w = World(t=1000.0, btu_s=600.0)
    w.op("A", cpu=512, memory=1024)
    w.host("old", "A", btu_end=1020.0, leased_at=420.0)  # 20 s left: in the 60 s window
    w.host("new", "A", leased_at=1000.0 - young_age)
    cfg = BtuParams(prolong_after_lease_s=180.0)
    actions = BtuPolicy(cfg).decide(w.snapshot())
    if prolonged:
        assert kinds(actions) == ["prolong"] and isinstance(actions[0], ProlongHost) and actions[0].host == "old"
        assert "leased 100 s ago" in actions[0].reason
    else:
        assert "prolong" not in kinds(actions)  # the release procedure decides (here: release)
        # (release procedure: docs/papers/btu-provisioning.md#host-release-at-the-btu-end)
