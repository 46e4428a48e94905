"""Kubernetes' HPA replica computation on hand-computed states (docs/papers/daedalus.md#kubernetes-hpa):
integer utilisation over summed millicores, tolerance, missing and unready pods, the initial
recommendation, clamping, stabilisation windows, rate limits with selectPolicy, the parameters."""
from __future__ import annotations

import numpy as np
import pytest

from testbed.policies.hpa import HpaParams, HpaPolicy, job_pods
from testbed.policies.hpa_core import (
    DISABLED,
    MIN,
    PAPER_CHART,
    PERCENT,
    PODS,
    V2_DEFAULTS,
    HpaBehaviour,
    HpaState,
    PodMetric,
    ScalingPolicy,
    ScalingRules,
    millicores,
    rate_limit,
    recommend,
    stabilise,
    sync,
    utilisation_pct,
)
from testbed.policies.job_inputs import JobSnapshot


def pods(*usages, request=1000, ready=True):
    """Pods at `usages` millicores of `request` each."""
    return [PodMetric(u, request, ready) for u in usages]


def missing(n, request=1000):
    return [PodMetric(None, request) for _ in range(n)]


def behaviour(up_window=0.0, down_window=300.0, up=V2_DEFAULTS.scale_up.policies,
              down=V2_DEFAULTS.scale_down.policies, up_select="Max", down_select="Max", lo=1, hi=18):
    return HpaBehaviour(ScalingRules(up_window, tuple(up), up_select),
                        ScalingRules(down_window, tuple(down), down_select),
                        lo, hi)


# -- 3. utilisation: integer millicores over the summed requests -------------------------------------

def test_millicores_are_whole_nanocores_rounded_up():
    assert millicores(0.29) == 290  # 0.29 * 1e9 nanocores exactly: no float residue
    assert millicores(0.2901) == 291  # 290,100,000 n -> 290.1 m -> 291
    assert millicores(0.0) == 0


def test_utilisation_is_the_integer_ratio_of_the_sums():
    assert utilisation_pct(pods(290)) == 29  # 290 * 100 // 1000 (the per-pod float mean gave 28)
    # unequal requests: (250 + 500) * 100 // (250 + 1000) = 75000 // 1250 = 60; the mean of the
    # per-pod ratios would be (100 + 50) / 2 = 75
    assert utilisation_pct([PodMetric(250, 250), PodMetric(500, 1000)]) == 60
    assert utilisation_pct([PodMetric(333, 1000), PodMetric(333, 1000), PodMetric(334, 1000)]) == 33  # 100000 // 3000
    assert utilisation_pct([PodMetric(None, 1000)]) is None  # no metric: no request counted


def test_recommendation_outside_and_inside_the_tolerance():
    assert recommend(4, pods(900, 900, 900, 900), 80) == 5  # 90/80 = 1.125 -> ceil(4.5)
    assert recommend(4, pods(870, 870, 870, 870), 80) == 4  # 87/80 = 1.0875: within 0.1
    assert recommend(4, pods(400, 400, 400, 400), 80) == 2  # 40/80 = 0.5 -> ceil(2.0)
    # 2879 * 100 // 4000 = 71; 71/80 = 0.8875 -> ceil(3.55) = 4
    assert recommend(4, pods(719, 720, 720, 720), 80) == 4
    assert recommend(3, pods(500, 600, 700), 80) == 3  # 60/80 = 0.75 -> ceil(2.25) = 3
    # float64, as in Kubernetes: 88/80 = 1.1000000000000001, just outside the tolerance -> ceil(4.4) = 5
    assert recommend(4, pods(880, 880, 880, 880), 80) == 5


def test_integer_utilisation_truncates():
    # 699 m of 1000 m -> 69 %, 69/80 = 0.8625: outside the tolerance
    assert recommend(2, pods(699, 699), 80) == 2  # ceil(1.725)
    assert recommend(10, pods(*[699] * 10), 80) == 9  # ceil(8.625)
    assert recommend(1, pods(290), 20) == 2  # 29/20 = 1.45 -> ceil(1.45) = 2


def test_ready_pod_count_and_requests_of_different_sizes():
    # requests 500m and 1000m, usage 600m and 900m: 1500 * 100 // 1500 = 100 %; 100/80 = 1.25 -> ceil(2.5) = 3
    assert recommend(2, [PodMetric(600, 500), PodMetric(900, 1000)], 80) == 3


def test_no_ready_metrics_is_no_recommendation():
    assert recommend(3, missing(3), 80) is None
    assert recommend(2, pods(500, 500, ready=False), 80) is None


def test_unready_pods_count_as_idle_when_scaling_out():
    # ready at 100 % -> 1.25; two unready at 0 %: 2000 * 100 // 4000 = 50 % -> 0.625 flips the direction: keep 4
    assert recommend(4, pods(1000, 1000) + pods(0, 0, ready=False), 80) == 4
    # 3000 * 100 // 4000 = 75 % -> 0.9375: within the tolerance, keep
    assert recommend(4, pods(1000, 1000, 1000) + pods(0, ready=False), 80) == 4
    # ready 200 % -> 2.5; the unready pod at 0 %: 150 % -> 1.875 -> ceil(1.875 * 4) = 8
    assert recommend(4, pods(2000, 2000, 2000) + pods(0, ready=False), 80) == 8
    # scaling in, an unready pod is left out: 400 * 100 // 1000 = 40 % -> 0.5 -> ceil(0.5 * 1) = 1
    assert recommend(2, pods(400) + pods(900, ready=False), 80) == 1


def test_missing_pods_count_as_their_request_when_scaling_in_and_idle_when_scaling_out():
    # ready 40 % -> 0.5; two missing at 100 % of 1000 m: 2800 * 100 // 4000 = 70 % -> 0.875 -> ceil(3.5) = 4 = current
    assert recommend(4, pods(400, 400) + missing(2), 80) == 4
    # ready 20 % -> 0.25; missing at 100 %: 1200 * 100 // 2000 = 60 % -> 0.75 -> ceil(1.5) = 2
    assert recommend(2, pods(200) + missing(1), 80) == 2
    # ready 10 % of 1000 m -> 0.125; missing at 100 % of 250 m: 350 * 100 // 1250 = 28 % -> 0.35 -> ceil(0.7) = 1
    assert recommend(2, pods(100) + missing(1, request=250), 80) == 1
    # target above 100 %: a missing pod counts at the target: ready 50 % -> 0.333; 200 + 600 * 1500 // 100 ...
    # ready 500 m -> 50 %, 50/150 = 0.333; missing at 150 % = 1500 m: 2000 * 100 // 2000 = 100 % -> 0.667 -> ceil(1.33)
    # = 2
    assert recommend(2, pods(500) + missing(1), 150) == 2
    # scaling out: ready 200 % -> 2.5; missing idle: 2000 * 100 // 2000 = 100 % -> 1.25 -> ceil(2.5) = 3
    assert recommend(2, pods(2000) + missing(1), 80) == 3


# -- 1. the initial recommendation ---------------------------------------------------------------

def test_a_new_hpa_cannot_scale_below_the_count_it_found_within_the_down_window():
    b, s = behaviour(), HpaState()
    idle = pods(*[100] * 12)  # 10 % -> 0.125 -> ceil(1.5) = 2
    assert sync(s, b, 15.0, 12, idle, 80) == (2, 12)  # initial (15, 12) in the window: max(2, 12)
    assert s.recommendations == [(15.0, 12), (15.0, 2)]
    assert sync(s, b, 300.0, 12, idle, 80) == (2, 12)
    assert sync(s, b, 315.0, 12, idle, 80) == (2, 2)  # 15 > 315 - 300 is false: the initial one left the window
    assert s.events == [(315.0, -10)]


def test_the_initial_recommendation_is_recorded_once():
    s = HpaState()
    sync(s, behaviour(), 0.0, 5, pods(*[800] * 5), 80)
    sync(s, behaviour(), 15.0, 5, pods(*[800] * 5), 80)
    assert s.recommendations == [(0.0, 5), (0.0, 5), (15.0, 5)]


# -- 2. clamping ---------------------------------------------------------------------------------

def test_a_count_outside_the_range_is_clamped_without_stabilisation_or_rate_limits():
    b = behaviour(lo=2, hi=6)
    s = HpaState()
    # 12 > 6: set to 6 at once (the down policy would allow it anyway; the 300 s window would not)
    assert sync(s, b, 0.0, 12, pods(*[100] * 12), 80) == (None, 6)
    assert s.recommendations == [(0.0, 12)]  # only the initial one: the clamp stores none
    assert s.events == [(0.0, -6)]
    # 1 < 2 with a scale-up policy of 0 % and 0 pods allowed: still set to 2
    b = behaviour(up=[ScalingPolicy(PODS, 1, 15.0)], up_select=DISABLED, lo=2, hi=6)
    assert sync(HpaState(), b, 0.0, 1, pods(2000), 80) == (None, 2)


def test_zero_replicas_means_scaling_is_off():
    assert sync(HpaState(), behaviour(), 0.0, 0, [], 80) == (None, 0)


def test_no_metrics_stores_no_recommendation():
    s = HpaState()
    assert sync(s, behaviour(), 0.0, 3, missing(3), 80) == (None, 3)
    assert s.recommendations == [(0.0, 3)]


# -- 4. stabilisation and rate limits --------------------------------------------------------------

def test_stabilisation_down_window():
    b = behaviour(up_window=0, down_window=300)
    s = HpaState()
    assert stabilise(s, b, 0.0, 5, 5) == 5
    assert stabilise(s, b, 100.0, 5, 3) == 5  # max(3, 5 at t=0)
    assert stabilise(s, b, 200.0, 5, 2) == 5
    assert stabilise(s, b, 301.0, 5, 2) == 3  # t=0 left the window: max(2, 3, 2)
    assert stabilise(s, b, 401.0, 5, 2) == 2


def test_stabilisation_up_window_of_the_paper():
    b = PAPER_CHART
    s = HpaState()
    stabilise(s, b, 0.0, 4, 5)
    assert stabilise(s, b, 100.0, 4, 8) == 5  # up = min(8, 5), down = max(8, 5)
    assert stabilise(s, b, 200.0, 4, 3) == 4  # up = 3 < current, down = 8: stay
    assert stabilise(s, b, 501.0, 4, 6) == 6  # only 6 in the windows


def test_rate_limits_of_the_v2_defaults():
    b = V2_DEFAULTS
    s = HpaState()
    assert rate_limit(s, b, 0.0, 2, 10) == 6  # Max(2 * 2, 2 + 4)
    s.events.append((-10.0, 4))  # 2 -> 6 ten seconds ago
    assert rate_limit(s, b, 0.0, 6, 10) == 6  # period start 2: limit Max(4, 6) = 6
    assert rate_limit(s, b, 10.0, 6, 20) == 12  # the event left the 15 s period: Max(12, 10), below max 18
    assert rate_limit(s, b, 10.0, 12, 30) == 18  # clamped to max_replicas
    assert rate_limit(HpaState(), b, 0.0, 6, 1) == 1  # down 100 %: anything down to min_replicas


def test_select_min_takes_the_smallest_change():
    up = [ScalingPolicy(PERCENT, 100, 15.0), ScalingPolicy(PODS, 4, 15.0)]
    down = [ScalingPolicy(PERCENT, 50, 60.0), ScalingPolicy(PODS, 1, 15.0)]
    b = behaviour(up=up, down=down, up_select=MIN, down_select=MIN)
    assert rate_limit(HpaState(), b, 0.0, 2, 10) == 4  # Min(2 * 2, 2 + 4)
    assert rate_limit(HpaState(), b, 0.0, 10, 1) == 9  # Min change: max(int(10 * 0.5), 10 - 1)
    b = behaviour(up=up, down=down)  # Max
    assert rate_limit(HpaState(), b, 0.0, 10, 1) == 5  # min(5, 9)


def test_each_policy_has_its_own_period():
    down = [ScalingPolicy(PERCENT, 50, 60.0), ScalingPolicy(PODS, 1, 15.0)]
    b = behaviour(down=down, down_select=MIN)
    s = HpaState(events=[(-30.0, -1)])  # 10 -> 9, 30 s ago: inside the 60 s period, outside the 15 s one
    # percent: start 10, int(10 * 0.5) = 5; pods: start 9, 9 - 1 = 8; Min change: max(5, 8) = 8
    assert rate_limit(s, b, 0.0, 9, 1) == 8
    b = behaviour(down=down)  # Max change: min(5, 8) = 5
    assert rate_limit(s, b, 0.0, 9, 1) == 5


def test_disabled_direction_never_changes():
    b = behaviour(up_select=DISABLED, down_select=DISABLED)
    assert rate_limit(HpaState(), b, 0.0, 4, 10) == 4
    assert rate_limit(HpaState(), b, 0.0, 4, 1) == 4
    s = HpaState()
    assert sync(s, b, 0.0, 4, pods(2000, 2000, 2000, 2000), 80) == (10, 4)  # ceil(2.5 * 4); held
    assert s.events == []


def test_sync_records_events_and_recommendations():
    b = behaviour(up_window=0, down_window=300)
    s = HpaState()
    raw, desired = sync(s, b, 0.0, 4, pods(900, 900, 900, 900), 80)
    assert (raw, desired) == (5, 5)
    assert s.events == [(0.0, 1)]
    raw, desired = sync(s, b, 15.0, 5, pods(300, 300, 300, 300, 300), 80)
    assert (raw, desired) == (2, 5)  # ceil(0.375 * 5) = 2, held by the 300 s down window
    assert s.recommendations == [(0.0, 4), (0.0, 5), (15.0, 2)]


# -- the parameters ------------------------------------------------------------------------------

def test_params_defaults_are_the_chart_and_a_zero_up_window_the_v2_defaults():
    assert HpaParams().behaviour() == PAPER_CHART
    assert HpaParams(up_window_s=0).behaviour() == V2_DEFAULTS


def test_params_express_policies_periods_and_selects():
    b = HpaParams(up_percent=0, up_pods=2, up_pods_period_s=60, down_pods=1, down_percent_period_s=30,
                  down_select="Min").behaviour()
    assert b.scale_up == ScalingRules(300.0, (ScalingPolicy(PODS, 2, 60.0),), "Max")
    assert b.scale_down == ScalingRules(300.0, (ScalingPolicy(PERCENT, 100, 30.0), ScalingPolicy(PODS, 1, 15.0)), "Min")


@pytest.mark.parametrize("kwargs, key", [
    ({"min_replicas": 0}, "min_replicas"),
    ({"min_replicas": 5, "max_replicas": 4}, "max_replicas"),
    ({"tolerance": 1.0}, "tolerance"),
    ({"tolerance": -0.1}, "tolerance"),
    ({"target_pct": 0}, "target_pct"),
    ({"up_window_s": -1}, "up_window_s"),
    ({"down_window_s": 3601}, "down_window_s"),
    ({"up_select": "max"}, "up_select"),
    ({"down_pods": -1}, "down_pods"),
    ({"up_pods_period_s": 1801}, "up_pods_period_s"),
    ({"policy_period_s": 0}, "policy_period_s"),
    ({"down_percent": 0}, "down_percent"),
    ({"request_ratio": 0}, "request_ratio"),
    ({"requests": {"w3": 0.0}}, "requests"),
    ({"worker_millicores": 0}, "worker_millicores"),
    ({"sync_s": 0}, "sync_s"),
    ({"initial_replicas": -1}, "initial_replicas"),
])
def test_params_validation_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=rf"^{key}: "):
        HpaParams(**kwargs).validate()


def test_requests_per_worker_in_millicores():
    p = HpaParams(request_ratio=0.5, requests={"w1": 1.0}, worker_millicores=500)
    assert p.request_m("w0") == 250 and p.request_m("w1") == 500
    assert p.request_m("i7", "O1") == 250 and HpaParams(requests={"O1": 0.25}).request_m("i7", "O1") == 250
    assert p.pod(0.58, True, "w0") == PodMetric(290, 250, True)  # 0.58 * 500 m


def test_job_pods_relative_to_the_request():
    snap = JobSnapshot(t=30.0, parallelism=2, max_scaleout=18, checkpoint_s=30.0, lag=0.0,
                       seconds=np.arange(1.0, 31.0), workload=np.zeros(30),
                       throughput={"w0": np.zeros(30), "w1": np.zeros(30)},
                       cpu={"w0": np.r_[np.full(15, 0.0), np.full(15, 0.4)],
                            "w1": np.r_[np.full(25, np.nan), np.full(5, 0.6)]},
                       uptime=np.arange(1.0, 31.0), ready={"w1": False})
    got = job_pods(snap, HpaParams(request_ratio=0.5))
    assert got == [PodMetric(400, 500, True), PodMetric(600, 500, False)]  # mean CPU of the last 15 s; 0.5 x 1000 m
    policy = HpaPolicy(HpaParams(target_pct=80, request_ratio=0.5, up_window_s=0))
    actions = policy.decide_job(snap)  # ready w0 at 400 * 100 // 500 = 80 %: on target
    assert actions == []
