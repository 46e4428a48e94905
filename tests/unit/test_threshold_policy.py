"""The BTU-agnostic threshold baseline (docs/papers/btu-provisioning.md#the-threshold-baseline): queue
thresholds, first fit, lease when full, release a host as soon as it is empty."""
from __future__ import annotations

import copy

import pytest

from testbed.model import NEW_HOST_PREFIX, LeaseHost, ReleaseHost, ScaleDown, ScaleUp
from testbed.policies.threshold import ThresholdParams, ThresholdPolicy
from tests.conftest import compose_config
from tests.unit.policy_fixtures import World, kinds

CFG = ThresholdParams()  # 50 / 250 / 1
T = 1000.0


def decide(world: World, cfg: ThresholdParams = CFG):
    return ThresholdPolicy(cfg).decide(world.snapshot())


def _one_type(queue: int, n: int = 1, max_hosts: int = 10) -> World:
    w = World(t=T, max_hosts=max_hosts)
    w.op("X", cpu=512, memory=1024, queue=queue)
    w.host("h1", *["X"] * n)  # room for 8 - n more by CPU, 7 - n by memory
    return w


@pytest.mark.parametrize(
    "queue, starts",
    [(0, 0), (1, 0), (50, 0), (51, 1), (250, 1), (251, 2), (10_000, 2)],
)
def test_queue_thresholds_start_instances(queue, starts):
    actions = decide(_one_type(queue))
    assert [(type(a), a.operator, a.host) for a in actions] == [(ScaleUp, "X", "h1")] * starts
    for a in actions:
        assert str(queue) in a.reason


def test_empty_queue_with_two_instances_stops_the_newest():
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=0)
    w.op("Y", cpu=512, memory=1024, queue=10)
    w.host("h1", "Y")  # y1
    w.host("h2", "X", "X")  # x1, x2
    w.instance("h1", "X")  # x3: the newest X, on the host leased first
    actions = decide(w)
    assert len(actions) == 1
    down = actions[0]
    assert isinstance(down, ScaleDown) and (down.operator, down.instance, down.host) == ("X", "x3", "h1")
    assert "0" in down.reason and "3 instances" in down.reason


def test_empty_queue_with_one_instance_does_nothing():
    assert decide(_one_type(queue=0, n=1)) == []


def test_queue_of_one_does_not_scale_down():
    assert decide(_one_type(queue=1, n=3)) == []  # 1 is not < 1


def test_first_fit_in_lease_order():
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=100)
    w.op("F", cpu=3840, memory=1024)
    w.op("G", cpu=1024, memory=4096)
    w.op("Y", cpu=64, memory=64, queue=10)
    w.host("hA", "Y", leased_at=20.0)  # nearly empty: the best fit, but leased last
    w.host("hZ", "G", leased_at=10.0)  # fits (free 3072 / 3072)
    w.host("hB", "F", leased_at=0.0)  # leased first, but free CPU 256 < 512
    actions = decide(w)
    assert [(type(a), a.host) for a in actions] == [(ScaleUp, "hZ")]


def test_host_being_released_gets_no_placement():
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=100)
    w.op("Y", cpu=512, memory=1024, queue=10)
    w.host("h1", "Y", releasing=True)
    w.host("h2", "Y")
    assert [(type(a), a.host) for a in decide(w)] == [(ScaleUp, "h2")]


def _full(queue: int, max_hosts: int) -> World:
    w = World(t=T, max_hosts=max_hosts)
    w.op("X", cpu=512, memory=1024, queue=queue)
    w.op("C", cpu=3584, memory=6144)
    w.host("h1", "X", "C")  # free 0 / 0
    return w


def test_lease_when_nothing_fits():
    actions = decide(_full(queue=100, max_hosts=10))
    assert kinds(actions) == ["lease", "scale_up"]
    lease, up = actions
    assert isinstance(lease, LeaseHost) and lease.host.startswith(NEW_HOST_PREFIX)
    assert up.host == lease.host


def test_second_start_uses_the_host_leased_for_the_first():
    actions = decide(_full(queue=300, max_hosts=10))
    assert kinds(actions) == ["lease", "scale_up", "scale_up"]
    assert actions[1].host == actions[2].host == actions[0].host


def test_no_lease_beyond_max_hosts():
    assert decide(_full(queue=300, max_hosts=1)) == []


def test_host_emptied_by_a_scale_down_is_released_in_the_same_cycle():
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=0)
    w.host("h1", "X")  # x1
    w.host("h2", "X")  # x2, the newest, alone on h2
    actions = decide(w)
    assert [(type(a), a.host) for a in actions] == [(ScaleDown, "h2"), (ReleaseHost, "h2")]
    assert actions[0].instance == "x2"


def test_threshold_ignores_the_btu():
    """A busy host at its BTU end is neither released nor prolonged by the baseline."""
    w = World(t=T, btu_s=600.0)
    w.op("X", queue=10)
    w.host("h1", "X", btu_end=T + 5.0)
    assert decide(w) == []


VISP = ThresholdParams(up_threshold=250, up2_threshold=1250, down_threshold=20)


@pytest.mark.parametrize(
    "queue, n, expected",
    [
        (250, 1, []),
        (251, 1, ["scale_up"]),
        (1250, 1, ["scale_up"]),
        (1251, 1, ["scale_up", "scale_up"]),
        (19, 2, ["scale_down"]),
        (20, 2, []),
        (19, 1, []),
    ],
)
def test_profile_thresholds_250_1250_20(queue, n, expected):
    assert kinds(decide(_one_type(queue, n), VISP)) == expected


def test_visp2017_profile_reaches_the_policy():
    cfg = compose_config("profile=visp2017").policies["threshold"]
    assert kinds(decide(_one_type(251), cfg)) == ["scale_up"]
    assert kinds(decide(_one_type(19, 2), cfg)) == ["scale_down"]
    assert kinds(decide(_one_type(1251), cfg)) == ["scale_up", "scale_up"]


def test_decide_is_pure():
    w = World(t=T, max_hosts=10)
    w.op("X", cpu=1024, memory=1024, queue=300)
    w.op("Y", cpu=512, memory=1024, queue=0)
    w.op("C", cpu=2560, memory=5120)
    w.host("h1", "X", "C", "Y")  # full: 1024 + 2560 + 512 = 4096, 1024 + 5120 + 1024 = 7168
    w.host("h2", "Y", cpu=512, memory=1024)  # too small for X; emptied by Y's scale-down
    snap = w.snapshot()
    before = copy.deepcopy(snap)
    policy = ThresholdPolicy(CFG)
    first = policy.decide(snap)
    assert kinds(first) == ["lease", "scale_up", "scale_up", "scale_down", "release"]
    assert policy.decide(snap) == first
    assert snap == before
