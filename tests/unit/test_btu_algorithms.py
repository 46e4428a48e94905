"""Algorithms 1-3 of the BTU-based policy and its release window (docs/papers/btu-provisioning.md
#algorithm-1-upscaling-trigger, #algorithm-2-host-selection, #algorithm-3-downscaling-utility,
#host-release-at-the-btu-end).

Every expected value is worked out by hand from the formulas in docs/papers/btu-provisioning.md with literal
numbers."""
from __future__ import annotations

import pytest

from testbed.model import OperatorType
from testbed.placement.base import placement_node
from testbed.placement.suitability import host_suitability
from testbed.plan import Plan
from testbed.policies.btu import BtuParams, UtilityVariant, downscale_utility, release_window, upscaling_trigger
from tests.unit.policy_fixtures import World, plan_host

THRESHOLD = 50  # scalingThreshold (docs/papers/btu-provisioning.md#evaluation-configuration)
SLO = 1000.0


# -- Algorithm 1: upscaling trigger ------------------------------------------------------------


def test_trigger_current_duration_above_slo_and_queue_above_threshold():
    # d = 1200 > 1000. Falling trend: mean_i = 3, mean_d = 1400, beta = -100,
    # alpha = 1400 - (-100) * 3 = 1700, predicted = 1700 - 100 * 6 = 1100.
    tr = upscaling_trigger((1600.0, 1500.0, 1400.0, 1300.0, 1200.0), SLO, 51, THRESHOLD)
    assert tr.up is True
    assert tr.duration == 1200.0
    assert tr.predicted == pytest.approx(1100.0)


@pytest.mark.parametrize("queue, up", [(10, False), (50, False), (51, True)], ids=["below", "exactly-at", "above"])
def test_trigger_needs_queue_strictly_above_threshold(queue, up):
    assert upscaling_trigger((1600.0, 1500.0, 1400.0, 1300.0, 1200.0), SLO, queue, THRESHOLD).up is up


def test_trigger_regression_predicts_slo_violation():
    # All durations are below the SLO; d = 950.
    # i = 1..5, mean_i = 3; mean_d = (600 + 700 + 800 + 850 + 950) / 5 = 3900 / 5 = 780.
    # Sxy = (-2)(-180) + (-1)(-80) + 0(20) + 1(70) + 2(170) = 360 + 80 + 0 + 70 + 340 = 850; Sxx = 10.
    # beta = 85, alpha = 780 - 85 * 3 = 525, predicted(N + 1 = 6) = 525 + 85 * 6 = 1035 > 1000.
    durations = (600.0, 700.0, 800.0, 850.0, 950.0)
    tr = upscaling_trigger(durations, SLO, 100, THRESHOLD)
    assert tr.duration == 950.0
    assert tr.predicted == pytest.approx(525 + 85 * 6)
    assert tr.up is True
    # The same trend with too little queued does not trigger.
    assert upscaling_trigger(durations, SLO, 50, THRESHOLD).up is False


def test_trigger_rising_durations_predicted_below_slo():
    # mean_d = 600, beta = 50, alpha = 600 - 150 = 450, predicted = 450 + 50 * 6 = 750 <= 1000.
    tr = upscaling_trigger((500.0, 550.0, 600.0, 650.0, 700.0), SLO, 1000, THRESHOLD)
    assert tr.predicted == pytest.approx(750.0)
    assert tr.up is False


def test_trigger_falling_durations_below_slo():
    # mean_d = 800, beta = -50, alpha = 950, predicted = 950 - 50 * 6 = 650.
    tr = upscaling_trigger((900.0, 850.0, 800.0, 750.0, 700.0), SLO, 1000, THRESHOLD)
    assert tr.predicted == pytest.approx(650.0)
    assert tr.up is False


def test_trigger_prediction_exactly_at_slo_is_not_a_violation():
    # Two samples: mean_i = 1.5, mean_d = 850, beta = ((-0.5)(-50) + (0.5)(50)) / 0.5 = 100,
    # alpha = 850 - 100 * 1.5 = 700, predicted(3) = 700 + 300 = 1000, not > 1000.
    tr = upscaling_trigger((800.0, 900.0), SLO, 1000, THRESHOLD)
    assert tr.predicted == pytest.approx(1000.0)
    assert tr.up is False


@pytest.mark.parametrize("d, up", [(990.0, False), (1000.0, False), (1010.0, True)])
def test_trigger_single_sample_only_first_test(d, up):
    tr = upscaling_trigger((d,), SLO, 1000, THRESHOLD)
    assert tr.predicted is None  # no regression with fewer than 2 samples
    assert tr.duration == d
    assert tr.up is up


def test_trigger_no_samples():
    tr = upscaling_trigger((), SLO, 10_000, THRESHOLD)
    assert tr.up is False
    assert tr.duration is None and tr.predicted is None


def test_trigger_reason_has_the_numbers():
    tr = upscaling_trigger((600.0, 700.0, 800.0, 850.0, 950.0), SLO, 100, THRESHOLD)
    for text in ("950", "1035", "1000", "100", "50"):
        assert text in tr.reason


# -- Algorithm 2: host suitability -------------------------------------------------------------

OP = OperatorType("O", slo_ms=1000.0, cpu=500, memory=1000, image_mb=68)
CF = 0.01


def test_cache_factor_default():
    assert placement_node().cache_factor == 0.01


@pytest.mark.parametrize(
    "cpu_free, memory_free, expected",
    [
        # f = min(2500/500, 3000/1000) = 3; diff = |2000/4000 - 2000/8000| = |0.5 - 0.25| = 0.25
        (2500, 3000, 0.25 / 3),
        # f = min(1500/500, 6000/1000) = 3; diff = |1000/4000 - 5000/8000| = |0.25 - 0.625| = 0.375
        (1500, 6000, 0.375 / 3),
        # f = min(1000/500, 7000/1000) = 2; diff = |500/4000 - 6000/8000| = |0.125 - 0.75| = 0.625
        (1000, 7000, 0.625 / 2),
        # exactly one more fits: f = 1 (not < 1); diff = |0/4000 - 0/8000| = 0
        (500, 1000, 0.0),
    ],
    ids=["memory-bound", "cpu-bound", "unbalanced", "exactly-one-fits"],
)
def test_suitability_without_image(cpu_free, memory_free, expected):
    h = plan_host(4000, 8000, cpu_free, memory_free)
    assert host_suitability(h, OP, CF) == pytest.approx(expected)


def test_suitability_with_cached_image_is_multiplied_by_cf():
    h = plan_host(4000, 8000, 2500, 3000, images=["O"])
    assert host_suitability(h, OP, CF) == pytest.approx(0.25 / 3 * 0.01)
    # another type's image does not count
    other = plan_host(4000, 8000, 2500, 3000, images=["P"])
    assert host_suitability(other, OP, CF) == pytest.approx(0.25 / 3)


@pytest.mark.parametrize(
    "cpu_free, memory_free",
    [(499, 8000), (4000, 999), (0, 0)],
    ids=["cpu: f = 499/500 < 1", "memory: f = 999/1000 < 1", "full"],
)
def test_suitability_does_not_fit(cpu_free, memory_free):
    assert host_suitability(plan_host(4000, 8000, cpu_free, memory_free, images=["O"]), OP, CF) == -1


# -- Algorithm 3: downscale utility ------------------------------------------------------------

P = 0.0001


def _utility(world: World, name: str, cfg: BtuParams | None = None, penalty: float = P) -> float:
    snap = world.snapshot()
    view = snap.operators[name]
    return downscale_utility(name, Plan(snap), view.queue, view.duration, penalty, cfg or BtuParams())


def _three_types() -> World:
    w = World()
    w.op("A", slo_ms=1000, n=4, scalings=3, queue=10, durations=(900.0, 500.0))
    w.op("B", slo_ms=500, n=2, scalings=1, queue=0, durations=(1000.0,))
    w.op("C", slo_ms=1000, n=1, scalings=0, queue=0, durations=(100.0,))
    return w


def test_utility_min_max_normalisation_delay_and_scalings():
    w = _three_types()
    # min n = 1, max n = 4; sum of scalings = 3 + 1 + 0 = 4; d is the newest sample.
    # A: 1 + (4-1)/(4-1) + 0 - (500/1000)(1+0.0001) - 3/4 = 1 + 1 - 0.50005 - 0.75 = 0.74995
    assert _utility(w, "A") == pytest.approx(0.74995)
    # B: 1 + (2-1)/(4-1) + 100 - (1000/500)(1.0001) - 1/4 = 1 + 1/3 + 100 - 2.0002 - 0.25
    assert _utility(w, "B") == pytest.approx(1 + 1 / 3 + 100 - 2.0002 - 0.25)


@pytest.mark.parametrize("n", [1, 0])
def test_utility_fewer_than_two_instances_is_minus_one(n):
    w = World()
    w.op("A", n=n, queue=0, durations=(10.0,))  # would otherwise score ~100
    w.op("B", n=5)
    assert _utility(w, "A") == -1


def test_utility_equal_instance_counts_give_instances_term_zero():
    w = World()
    w.op("A", slo_ms=1000, n=3, scalings=1, queue=10, durations=(500.0,))
    w.op("B", slo_ms=1000, n=3, scalings=1, queue=10, durations=(500.0,))
    # instances = 0 (max == min); scalings = 1/2
    # 1 + 0 + 0 - 0.5 * 1.0001 - 0.5 = -0.00005
    assert _utility(w, "A") == pytest.approx(-0.00005)


@pytest.mark.parametrize("penalty, expected", [(0.0001, 1 - 0.8 * 1.0001), (0.5, 1 - 0.8 * 1.5)])
def test_utility_delay_term_uses_penalty(penalty, expected):
    w = World()
    w.op("A", slo_ms=1000, n=2, queue=10, durations=(800.0,))
    w.op("B", slo_ms=1000, n=2, queue=10)
    # instances 0, scalings 0 (sum 0), queueLoad 0: 1 - (800/1000)(1 + P)
    assert _utility(w, "A", penalty=penalty) == pytest.approx(expected)


def test_utility_zero_sum_of_scalings():
    w = World()
    w.op("A", slo_ms=1000, n=4, scalings=0, queue=10, durations=(200.0,))
    w.op("B", slo_ms=1000, n=2, scalings=0, queue=10)
    # 1 + (4-2)/(4-2) + 0 - 0.2 * 1.0001 - 0 = 1.79998
    assert _utility(w, "A") == pytest.approx(1.79998)


@pytest.mark.parametrize("queue, expected", [(0, 100 + 1 - 0.2 * 1.0001), (1, 1 - 0.2 * 1.0001)])
def test_utility_queue_load_only_below_one(queue, expected):
    w = World()
    w.op("A", slo_ms=1000, n=2, queue=queue, durations=(200.0,))
    w.op("B", slo_ms=1000, n=2)
    assert _utility(w, "A") == pytest.approx(expected)


def test_utility_weights_paper():
    cfg = BtuParams(w1=2, w2=3, w3=5, w4=7)
    # B: 1 + W1*(1/3) + W2*100 - W3*2.0002 - W4*0.25
    assert _utility(_three_types(), "B", cfg) == pytest.approx(1 + 2 / 3 + 300 - 5 * 2.0002 - 7 * 0.25)


def test_utility_preprint_variant():
    cfg = BtuParams(utility_variant=UtilityVariant.preprint)
    w = _three_types()
    # A: W1*1 - W2*(500/1000)*0.0001 - W3*3/4 + W4*0 = 1 - 0.00005 - 0.75 = 0.24995 (no constant 1)
    assert _utility(w, "A", cfg) == pytest.approx(0.24995)
    # B: 1/3 - (1000/500)*0.0001 - 1/4 + 100
    assert _utility(w, "B", cfg) == pytest.approx(1 / 3 - 0.0002 - 0.25 + 100)
    assert _utility(w, "C", cfg) == -1
    weighted = BtuParams(utility_variant=UtilityVariant.preprint, w1=2, w2=3, w3=5, w4=7)
    # B: W1*(1/3) - W2*0.0002 - W3*0.25 + W4*100
    assert _utility(w, "B", weighted) == pytest.approx(2 / 3 - 3 * 0.0002 - 5 * 0.25 + 700)


def test_utility_follows_the_plan():
    """n and scalings come from the plan, so a removal earlier in the cycle is seen."""
    snap = _three_types().snapshot()
    plan = Plan(snap)
    plan.n["A"] = 3  # as if one A had been removed: n 3, scalings 4, sum 5
    plan.scalings["A"] = 4
    # 1 + (3-1)/(3-1) + 0 - 0.50005 - 4/5 = 0.69995
    assert downscale_utility("A", plan, 10, 500.0, P, BtuParams()) == pytest.approx(0.69995)


# -- release window (docs/papers/btu-provisioning.md#host-release-at-the-btu-end, Decision) ----


@pytest.mark.parametrize(
    "btu_s, reasoning_s, min_s, expected",
    [
        (600, 60, 0, 60),  # 5 % of 600 s = 30 s < one 60 s cycle
        (3600, 60, 0, 180),  # 5 % of 3600 s = 180 s
        (1800, 60, 0, 90),  # 5 % of 1800 s = 90 s
        (600, 20, 0, 30),  # preprint: 20 s cycles, 5 % of 600 s = 30 s
        (600, 20, 40, 40),  # VISP: at least 40 s
    ],
)
def test_release_window(btu_s, reasoning_s, min_s, expected):
    cfg = BtuParams(release_window_min_s=min_s)
    assert release_window(cfg, btu_s, reasoning_s) == pytest.approx(expected)
