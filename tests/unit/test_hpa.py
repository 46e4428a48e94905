"""Kubernetes' HPA replica computation on hand-computed states (docs/papers/daedalus.md#kubernetes-hpa):
tolerance, integer utilisation, missing and unready pods, stabilisation windows, rate limits."""
from __future__ import annotations

import numpy as np

from testbed.policies.hpa import HpaParams, HpaPolicy, job_pods
from testbed.policies.hpa_core import HpaBehaviour, HpaState, PodMetric, rate_limit, recommend, stabilise, sync
from testbed.policies.job_inputs import JobSnapshot


def pods(*usages, ready=True):
    return [PodMetric(u, ready) for u in usages]


def test_recommendation_outside_and_inside_the_tolerance():
    assert recommend(4, pods(0.9, 0.9, 0.9, 0.9), 80) == 5  # 90/80 = 1.125 -> ceil(4.5)
    assert recommend(4, pods(0.87, 0.87, 0.87, 0.87), 80) == 4  # 87/80 = 1.0875: within 0.1
    assert recommend(4, pods(0.4, 0.4, 0.4, 0.4), 80) == 2  # 40/80 -> ceil(2)
    assert recommend(4, pods(0.719, 0.72, 0.72, 0.72), 80) == 4  # int(71.975) = 71: 0.8875, ceil(3.55) = 4
    assert recommend(3, pods(0.5, 0.6, 0.7), 80) == 3  # 60/80 = 0.75 -> ceil(2.25) = 3


def test_integer_utilisation_truncates():
    # 0.6999 * 100 = 69.99 -> 69 %, 69/80 = 0.8625 -> outside the tolerance, ceil(0.8625 * 2) = 2
    assert recommend(2, pods(0.6999, 0.6999), 80) == 2
    assert recommend(10, pods(*[0.6999] * 10), 80) == 9  # ceil(8.625)


def test_unready_pods_count_as_idle_when_scaling_out():
    # ready 100 % -> 1.25; with two unready at 0 %: 50 % -> 0.625 flips the direction: keep 4
    assert recommend(4, pods(1.0, 1.0) + pods(0.0, 0.0, ready=False), 80) == 4
    # ready 100 % with one unready: (1 + 1 + 1 + 0)/4 = 75 % -> 0.9375: within the tolerance, keep
    assert recommend(4, pods(1.0, 1.0, 1.0) + pods(0.0, ready=False), 80) == 4
    # ready 200 % -> 2.5; with the unready pod at 0 %: 150 % -> 1.875 -> ceil(1.875 * 4) = 8
    assert recommend(4, pods(2.0, 2.0, 2.0) + pods(0.0, ready=False), 80) == 8


def test_missing_pods_count_as_full_when_scaling_in():
    # ready 40 % -> 0.5; two missing at 100 %: 70 % -> 0.875 -> ceil(3.5) = 4 = current
    assert recommend(4, pods(0.4, 0.4) + [PodMetric(None), PodMetric(None)], 80) == 4
    # ready 20 % -> 0.25; missing at 100 %: (0.2 + 1)/2 = 60 % -> 0.75 -> ceil(1.5) = 2
    assert recommend(2, pods(0.2) + [PodMetric(None)], 80) == 2


def test_stabilisation_down_window():
    b = HpaBehaviour(up_window_s=0, down_window_s=300)
    s = HpaState()
    assert stabilise(s, b, 0.0, 5, 5) == 5
    assert stabilise(s, b, 100.0, 5, 3) == 5  # max(3, 5 at t=0)
    assert stabilise(s, b, 200.0, 5, 2) == 5
    assert stabilise(s, b, 301.0, 5, 2) == 3  # t=0 left the window: max(2, 3, 2)
    assert stabilise(s, b, 401.0, 5, 2) == 2


def test_stabilisation_up_window_of_the_paper():
    b = HpaBehaviour(up_window_s=300, down_window_s=300)
    s = HpaState()
    stabilise(s, b, 0.0, 4, 5)
    assert stabilise(s, b, 100.0, 4, 8) == 5  # up = min(8, 5), down = max(8, 5)
    assert stabilise(s, b, 200.0, 4, 3) == 4  # up = 3 < current, down = 8: stay
    assert stabilise(s, b, 501.0, 4, 6) == 6  # only 6 in the windows


def test_rate_limits():
    b = HpaBehaviour()
    s = HpaState()
    assert rate_limit(s, b, 0.0, 2, 10) == 6  # max(2 * 2, 2 + 4)
    s.events.append((-10.0, 4))  # 2 -> 6 ten seconds ago
    assert rate_limit(s, b, 0.0, 6, 10) == 6  # period start 2: limit 6
    assert rate_limit(s, b, 10.0, 6, 20) == 12  # the event left the 15 s period: max(12, 10), below max 18
    assert rate_limit(s, b, 10.0, 12, 30) == 18  # clamped to max_replicas
    assert rate_limit(HpaState(), b, 0.0, 6, 1) == 1  # down 100 %: anything down to min_replicas


def test_sync_records_events_and_recommendations():
    b = HpaBehaviour(up_window_s=0, down_window_s=300)
    s = HpaState()
    raw, desired = sync(s, b, 0.0, 4, pods(0.9, 0.9, 0.9, 0.9), 80)
    assert (raw, desired) == (5, 5)
    assert s.events == [(0.0, 1)]
    raw, desired = sync(s, b, 15.0, 5, pods(0.3, 0.3, 0.3, 0.3, 0.3), 80)
    assert (raw, desired) == (2, 5)  # ceil(0.375 * 5) = 2, held by the 300 s down window
    assert s.recommendations == [(0.0, 5), (15.0, 2)]


def test_job_pods_relative_to_the_request():
    snap = JobSnapshot(t=30.0, parallelism=2, max_scaleout=18, checkpoint_s=30.0, lag=0.0,
                       seconds=np.arange(1.0, 31.0), workload=np.zeros(30),
                       throughput={"w0": np.zeros(30), "w1": np.zeros(30)},
                       cpu={"w0": np.r_[np.full(15, 0.0), np.full(15, 0.4)], "w1": np.r_[np.full(25, np.nan), np.full(5, 0.6)]},
                       uptime=np.arange(1.0, 31.0), ready={"w1": False})
    got = job_pods(snap, 15, 0.5)
    assert [round(p.usage, 9) for p in got] == [0.8, 1.2]  # mean CPU of the last 15 s / 0.5
    assert [p.ready for p in got] == [True, False]
    policy = HpaPolicy(HpaParams(target_pct=80, request_ratio=0.5, up_window_s=0))
    actions = policy.decide(snap)  # ready w0 at 80 %: on target
    assert actions == []
