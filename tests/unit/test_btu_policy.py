"""BtuPolicy.decide(): the upscaling procedure (docs/papers/btu-provisioning.md#upscaling-procedure)
and the host release procedure (docs/papers/btu-provisioning.md#host-release-at-the-btu-end).

Hosts are 4096 CPU shares / 7168 MB unless stated; every score and utility behind an expected
decision is worked out by hand in a comment."""
from __future__ import annotations

import copy

import pytest

from testbed.model import (
    NEW_HOST_PREFIX,
    LeaseHost,
    Migrate,
    ProlongHost,
    ReleaseHost,
    ScaleDown,
    ScaleUp,
)
from testbed.policies.btu import BtuParams, BtuPolicy
from tests.unit.policy_fixtures import World, kinds

CFG = BtuParams()
T = 1000.0


def decide(world: World, cfg: BtuParams = CFG):
    return BtuPolicy(cfg).decide(world.snapshot())


# -- upscaling procedure (docs/papers/btu-provisioning.md#upscaling-procedure) -----------------


def _placement_world(x_image_on_h4: bool) -> World:
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=100, durations=(1200.0,))  # d 1200 > 1000, queue 100 > 50
    w.op("F1", cpu=3584, memory=512)
    w.op("F2", cpu=2048, memory=5120)
    w.op("F3", cpu=3072, memory=6144)
    # h1: free 4096-512-3584 = 0 CPU -> f = 0 < 1 -> -1
    w.host("h1", "X", "F1")
    # h2: free 2048 / 2048: f = min(4, 2) = 2; diff = |1536/4096 - 1024/7168| = |0.375 - 0.142857|
    #     = 0.232143; s = 0.116071
    w.host("h2", "F2")
    # h3: empty: f = min(8, 7) = 7; diff = |3584/4096 - 6144/7168| = |0.875 - 0.857143| = 0.017857;
    #     s = 0.002551
    w.host("h3")
    # h4: free 1024 / 1024: f = min(2, 1) = 1; diff = |512/4096 - 0/7168| = 0.125;
    #     s = 0.125, or 0.125 * 0.01 = 0.00125 with X's image cached
    w.host("h4", "F3", images=["X"] if x_image_on_h4 else [])
    return w


def test_upscale_places_on_the_lowest_suitability_host_cached_image_first():
    # with the image: h4 0.00125 < h3 0.002551 < h2 0.116071; h1 does not fit
    actions = decide(_placement_world(x_image_on_h4=True))
    assert len(actions) == 1
    up = actions[0]
    assert isinstance(up, ScaleUp) and (up.operator, up.host) == ("X", "h4")
    assert "1200" in up.reason and "1000" in up.reason and "100" in up.reason


def test_upscale_without_cached_image_picks_the_balanced_empty_host():
    # without the image: h3 0.002551 < h2 0.116071 < h4 0.125
    actions = decide(_placement_world(x_image_on_h4=False))
    assert [(type(a), a.operator, a.host) for a in actions] == [(ScaleUp, "X", "h3")]


def test_upscale_uses_only_the_last_n_samples():
    # Last 5: (600, 700, 800, 850, 950): predicted 1035 > 1000 (see test_btu_algorithms).
    # All 7 would give: mean_i = 4, mean_d = 6800/7 = 971.4, Sxy = -3*1500 - 2*1400 - 600 + 850 + 2*950
    # = -5150, beta = -5150/28 = -183.9, predicted(8) = 971.4 - 183.9 * 4 = 235.8 -> no trigger.
    w = World(t=T)
    w.op("X", queue=100, durations=(1500.0, 1400.0, 600.0, 700.0, 800.0, 850.0, 950.0))
    w.host("h1", "X")
    actions = decide(w)
    assert [(type(a), a.host) for a in actions] == [(ScaleUp, "h1")]
    assert "1035" in actions[0].reason


def test_no_trigger_no_action():
    w = World(t=T)
    w.op("X", queue=100, durations=(900.0, 850.0, 800.0, 750.0, 700.0))  # predicted 650
    w.op("Y", queue=10, durations=(5000.0,))  # queue 10 <= 50
    w.host("h1", "X", "Y")
    assert decide(w) == []


def _room_world(max_hosts: int = 5) -> World:
    w = World(t=T, max_hosts=max_hosts)
    w.op("X", cpu=1024, memory=2048, queue=100, durations=(1500.0,), scalings=2)
    w.op("A", cpu=512, memory=1024, queue=0, durations=(100.0,), scalings=1)
    w.op("B", cpu=512, memory=1024, queue=10, durations=(500.0,), scalings=1)
    # h1 free: CPU 4096 - 1024 - 4*512 = 1024, memory 7168 - 2048 - 4*1024 = 1024;
    # X: f = min(1024/1024, 1024/2048) = 0.5 < 1 -> -1. No other host.
    w.host("h1", "X", "A", "A", "B", "B")
    return w


def test_upscale_scales_down_the_highest_utility_other_type_to_make_room():
    # n: X 1, A 2, B 2 -> min 1, max 2; scalings sum 2 + 1 + 1 = 4
    # U_A = 1 + (2-1)/(2-1) + 100 - (100/1000)(1.0001) - 1/4 = 101.64999
    # U_B = 1 + 1 + 0 - (500/1000)(1.0001) - 1/4 = 1.24995
    # removing one A frees 512/1024 -> 1536/2048: X fits (f = min(1.5, 1) = 1). A lease is possible
    # but not needed.
    actions = decide(_room_world())
    assert kinds(actions) == ["scale_down", "scale_up"]
    down, up = actions
    assert isinstance(down, ScaleDown)
    assert (down.operator, down.host) == ("A", "h1") and down.instance in {"a1", "a2"}
    assert "101.650" in down.reason  # U_A rounded to 3 decimals
    assert isinstance(up, ScaleUp) and (up.operator, up.host) == ("X", "h1")


def _no_room_world(max_hosts: int) -> World:
    w = World(t=T, max_hosts=max_hosts)
    w.op("X", cpu=1024, memory=2048, queue=100, durations=(1500.0,))
    w.op("A", cpu=512, memory=1024, queue=0, durations=(100.0,))  # U_A ~ 101.9 > 0
    w.op("C", cpu=1024, memory=3072)  # n = 1 -> U_C = -1
    # h1 free: CPU 4096 - 1024 - 1024 - 1024 = 1024, memory 7168 - 2048 - 2048 - 3072 = 0.
    # Only one A may go (n 2 -> 1): 1536 / 1024 -> X (2048 MB) still does not fit.
    w.host("h1", "X", "A", "A", "C")
    return w


def test_upscale_leases_when_scaling_down_cannot_make_room():
    actions = decide(_no_room_world(max_hosts=5))
    assert kinds(actions) == ["lease", "scale_up"]  # nothing reconfigured: no scale-down
    lease, up = actions
    assert isinstance(lease, LeaseHost) and lease.host.startswith(NEW_HOST_PREFIX)
    assert isinstance(up, ScaleUp) and up.operator == "X" and up.host == lease.host


def test_upscale_at_max_hosts_does_nothing():
    assert decide(_no_room_world(max_hosts=1)) == []


@pytest.mark.parametrize("d_b, scaled_down", [(2000.0, False), (1990.0, True)])
def test_upscale_scales_down_only_positive_utility_types(d_b, scaled_down):
    w = World(t=T)
    w.op("X", cpu=1024, memory=2048, queue=100, durations=(1500.0,))
    w.op("B", cpu=512, memory=1024, queue=10, durations=(d_b,))
    w.op("C", cpu=1024, memory=2048)  # n = 1 -> -1
    # h1 free: 4096 - 1024 - 2*512 - 1024 = 1024 / 7168 - 2048 - 2*1024 - 2048 = 1024: X does not fit;
    # without one B: 1536 / 2048, X fits.
    w.host("h1", "X", "B", "B", "C")
    # n: X 1, B 2, C 1 -> instances_B = 1; scalings all 0.
    # d_B 2000: U_B = 1 + 1 + 0 - 2.0 * 1.0001 - 0 = -0.0002 -> not a candidate: lease
    # d_B 1990: U_B = 1 + 1 + 0 - 1.99 * 1.0001 - 0 = 0.009801 -> scale one B down
    actions = decide(w)
    if scaled_down:
        assert kinds(actions) == ["scale_down", "scale_up"]
        assert (actions[0].operator, actions[0].host, actions[1].host) == ("B", "h1", "h1")
        assert "0.010" in actions[0].reason
    else:
        assert kinds(actions) == ["lease", "scale_up"]


def test_room_making_does_not_stop_half_way():
    w = World(t=T)
    w.op("X", cpu=1024, memory=2048, queue=100, durations=(1500.0,))
    w.op("A", cpu=512, memory=256, queue=10, durations=(1500.0,))
    w.op("C", cpu=1536, memory=2048)  # n = 1 -> -1
    # h1 free: CPU 4096 - 1024 - 3*512 - 1536 = 0, memory 7168 - 2048 - 3*256 - 2048 = 2304.
    # X needs 1024 CPU: two A must go (n 3 -> 1, allowed).
    # First simulation: n X 1, A 3, C 1 -> instances_A = 1; scalings all 0;
    #   U_A = 1 + 1 + 0 - 1.5 * 1.0001 - 0 = 0.49985 > 0 -> two removals make room: yes.
    # After one removal: n A 2 (max 2, min 1) -> instances 1; scalings A 1 of 1 -> 1;
    #   U_A = 1 + 1 - 1.50015 - 1 = -0.50015 -> the second simulation fails.
    w.host("h1", "X", "A", "A", "A", "C")
    actions = decide(w)
    # Either room is made on h1 (two ScaleDowns, ScaleUp on h1) or nothing is reconfigured (lease).
    assert kinds(actions) in (["scale_down", "scale_down", "scale_up"], ["lease", "scale_up"]), actions


def test_placements_earlier_in_the_cycle_are_seen_by_later_ones():
    w = World(t=T)
    w.op("X", cpu=512, memory=1024, queue=100, durations=(1500.0,))
    w.op("Y", cpu=512, memory=1024, queue=100, durations=(1500.0,))
    w.op("F", cpu=3584, memory=6144)
    w.host("h1", "F")  # free 512 / 1024: room for exactly one of X, Y
    # X (first in topological order) takes h1; for Y no host fits and no type has a positive
    # utility (X: n 0 + 1 = 1, F: n 1, Y itself excluded) -> a new host.
    actions = decide(w)
    assert [(a.kind, getattr(a, "operator", None)) for a in actions] == [
        ("scale_up", "X"), ("lease", None), ("scale_up", "Y")]
    assert actions[0].host == "h1" and actions[2].host == actions[1].host


# -- host release procedure (docs/papers/btu-provisioning.md#host-release-at-the-btu-end) -------


@pytest.mark.parametrize("remaining, examined", [(50.0, True), (70.0, False), (25.0, True)])
def test_release_window_btu10_with_60s_cycle_is_60s(remaining, examined):
    # BTU 600 s: 5 % = 30 s, but the reasoning interval is 60 s -> window 60 s.
    w = World(t=T, btu_s=600.0, reasoning_s=60.0)
    w.op("X")
    w.host("h0", "X")  # its BTU ends far away
    w.host("h1", btu_end=T + remaining)  # empty
    actions = decide(w)
    if examined:
        assert [(type(a), a.host) for a in actions] == [(ReleaseHost, "h1")]
        assert f"{remaining:.0f} s" in actions[0].reason and "60 s" in actions[0].reason
    else:
        assert actions == []


@pytest.mark.parametrize("remaining, examined", [(170.0, True), (190.0, False)])
def test_release_window_btu60_is_five_percent(remaining, examined):
    # BTU 3600 s: 5 % = 180 s > 60 s
    w = World(t=T, btu_s=3600.0, reasoning_s=60.0)
    w.op("X")
    w.host("h1", btu_end=T + remaining)
    assert kinds(decide(w)) == (["release"] if examined else [])


def test_host_already_releasing_is_not_examined_again():
    w = World(t=T, btu_s=600.0)
    w.op("X")
    w.host("h1", btu_end=T + 10.0, releasing=True)
    assert decide(w) == []


def _cap_world(on_host: int, elsewhere: int) -> World:
    w = World(t=T, btu_s=600.0, reasoning_s=60.0)
    w.op("A", cpu=256, memory=512, queue=0, durations=(100.0,))
    w.host("h", *["A"] * on_host, btu_end=T + 50.0)
    w.host("h2", *["A"] * elsewhere)
    return w


def test_release_removes_at_most_20_percent_and_migrates_the_rest():
    # A: n = 10 (5 on h, 5 on h2), the only type -> instances term 0 (max == min).
    # U_A = 1 + 0 + 100 - (100/1000)(1.0001) - 0 = 100.89999 > 0
    # cap = 20 % of 10 = 2 removed; the other 3 migrate to h2 (free 4096 - 5*256 = 2816 CPU,
    # 7168 - 5*512 = 4608 MB: room for 9 more).
    actions = decide(_cap_world(5, 5))
    assert kinds(actions) == ["scale_down"] * 2 + ["migrate"] * 3 + ["release"]
    downs, moves, release = actions[:2], actions[2:5], actions[5]
    assert all(isinstance(a, ScaleDown) and a.operator == "A" and a.host == "h" for a in downs)
    assert all(isinstance(a, Migrate) and a.operator == "A" and (a.host, a.target) == ("h", "h2") for a in moves)
    removed, moved = {a.instance for a in downs}, {a.instance for a in moves}
    assert removed.isdisjoint(moved) and removed | moved == {"a1", "a2", "a3", "a4", "a5"}
    assert isinstance(release, ReleaseHost) and release.host == "h"
    for a in actions:
        assert "A 100.900" in a.reason, a  # the utility behind every decision
    assert "remove 2, migrate 3" in release.reason


def test_release_removes_at_least_one_instance():
    # B-like type: n = 3 (2 on h, 1 on h2); 20 % of 3 = 0.6 < 1 -> 1 removed, 1 migrated.
    # U = 1 + 0 + 100 - 0.10001 - 0 = 100.89999 > 0
    actions = decide(_cap_world(2, 1))
    assert kinds(actions) == ["scale_down", "migrate", "release"]
    assert actions[1].target == "h2"
    assert "remove 1, migrate 1" in actions[2].reason


def test_release_migration_target_by_algorithm_2_with_the_host_excluded():
    w = World(t=T, btu_s=600.0)
    w.op("M", cpu=512, memory=1024, queue=0, durations=(100.0,))  # n = 1 -> U_M = -1: migrate
    w.op("F", cpu=2048, memory=5120)
    # h (being released) would score lowest: free 3584/6144, f = min(7, 6) = 6,
    #   diff = |3072/4096 - 5120/7168| = |0.75 - 0.714286| = 0.035714, s = 0.005952 * 0.01 = 0.0000595
    w.host("h", "M", btu_end=T + 30.0)
    # h2 empty, no image: f = 7, diff = 0.017857, s = 0.002551
    w.host("h2")
    # h3 free 2048/2048 with M's image: f = 2, diff = |1536/4096 - 1024/7168| = 0.232143,
    #   s = 0.116071 * 0.01 = 0.00116 -> the target
    w.host("h3", "F", images=["M"])
    actions = decide(w)
    assert kinds(actions) == ["migrate", "release"]
    move, release = actions
    assert (move.operator, move.instance, move.host, move.target) == ("M", "m1", "h", "h3")
    assert "M -1.000" in move.reason and "M -1.000" in release.reason
    assert "remove 0, migrate 1" in release.reason


def test_release_migration_may_make_room_by_scaling_down_elsewhere():
    w = World(t=T, btu_s=600.0)
    w.op("M", cpu=1024, memory=2048)  # n = 1 -> -1: migrate
    w.op("B", cpu=1024, memory=2048, queue=0, durations=(100.0,))
    w.host("h", "M", btu_end=T + 30.0)
    # h2 free 4096 - 3072 = 1024 / 7168 - 6144 = 1024: M does not fit.
    # U_B: n M 1, B 3 -> instances (3-1)/(3-1) = 1; 1 + 1 + 100 - 0.10001 - 0 = 101.89999;
    # removing one B gives 2048/3072: M fits.
    w.host("h2", "B", "B", "B")
    actions = decide(w)
    assert kinds(actions) == ["scale_down", "migrate", "release"]
    down, move, release = actions
    assert (down.operator, down.host) == ("B", "h2") and "101.900" in down.reason
    assert (move.instance, move.target) == ("m1", "h2")
    assert release.host == "h"


def _infeasible_world() -> World:
    w = World(t=T, btu_s=600.0, max_hosts=10)
    w.op("A", cpu=1024, memory=2048, queue=0, durations=(100.0,))
    w.op("C", cpu=4096, memory=7168)
    # U_A: n A 2, C 1 -> 1 + (2-1)/(2-1) + 100 - 0.10001 - 0 = 101.89999 > 0;
    # cap = max(1, floor(0.4)) = 1 removed, the other A must migrate, but h2 is full and C (n = 1)
    # cannot make room. The plan never leases.
    w.host("h", "A", "A", btu_end=T + 30.0)
    w.host("h2", "C")
    return w


def test_release_infeasible_plan_prolongs_and_does_nothing_else():
    actions = decide(_infeasible_world())
    assert len(actions) == 1
    prolong = actions[0]
    assert isinstance(prolong, ProlongHost) and prolong.host == "h"
    assert "A 101.900" in prolong.reason


def test_prolonged_host_stays_a_placement_candidate():
    w = _infeasible_world()
    w.op("X", cpu=512, memory=1024, queue=100, durations=(2000.0,), n=1)  # n = 1: A's utility unchanged
    # h free 4096 - 2048 = 2048 / 7168 - 4096 = 3072 -> X fits on h only
    actions = decide(w)
    assert [(type(a), a.host) for a in actions] == [(ProlongHost, "h"), (ScaleUp, "h")]


def test_released_host_receives_no_placement_in_the_same_cycle():
    w = World(t=T, btu_s=600.0)
    w.op("X", cpu=512, memory=1024, queue=100, durations=(2000.0,), n=1)
    w.op("C", cpu=4096, memory=7168)
    w.host("h", btu_end=T + 30.0)  # empty and at its BTU end: released
    w.host("h2", "C")  # full
    actions = decide(w)
    assert kinds(actions) == ["release", "lease", "scale_up"]
    assert actions[0].host == "h" and actions[2].host == actions[1].host != "h"


def test_btu_policy_keeps_an_empty_host_until_its_btu_end():
    w = World(t=T, btu_s=600.0)
    w.op("X")
    w.host("h", btu_end=T + 300.0)
    assert decide(w) == []


# -- purity ------------------------------------------------------------------------------------


def test_decide_is_pure():
    w = _cap_world(5, 5)
    w.op("X", cpu=512, memory=1024, queue=100, durations=(600.0, 700.0, 800.0, 850.0, 950.0))
    w.host("h3", "X", btu_end=T + 45.0)  # also at its BTU end
    snap = w.snapshot()
    before = copy.deepcopy(snap)
    policy = BtuPolicy(CFG)
    first = policy.decide(snap)
    second = policy.decide(snap)
    assert first == second
    assert len(first) > 3
    assert snap == before


# -- two hosts at their BTU end in the same cycle ------------------------------------------------


def test_instances_migrated_in_this_cycle_are_not_moved_again():
    """Regression: a host released later in the same cycle is no migration target, so no action
    names the plan's placeholder ids (new:instanceN) and no instance is moved twice."""
    w = World(t=T, btu_s=600.0)
    w.op("M", cpu=512, memory=1024)  # n = 1 -> U_M = -1: migrate
    w.host("hA", "M", btu_end=T + 40.0)  # examined first
    # hB: empty, M's image cached: s = 0.017857/7 * 0.01 = 0.0000255 would be the best target, but
    # hB's own BTU ends within the window too (50 s <= 60 s)
    w.host("hB", btu_end=T + 50.0, images=["M"])
    w.host("h2")  # empty, no image: f = 7, diff = 0.017857, s = 0.002551
    snap = w.snapshot()
    actions = BtuPolicy(CFG).decide(snap)
    known = {i.id for i in snap.instances}
    referenced = [a.instance for a in actions if isinstance(a, (Migrate, ScaleDown))]
    assert set(referenced) <= known, actions
    assert len(referenced) == len(set(referenced)), actions  # one decision per instance
    assert [(a.kind, a.host, getattr(a, "target", None)) for a in actions] == [
        ("migrate", "hA", "h2"), ("release", "hA", None), ("release", "hB", None)]


def test_host_due_later_becomes_a_target_again_when_prolonged():
    """hA cannot go (its only possible target hB is due too): hA is prolonged; then hB, examined
    next, may move its instance to hA, which stays."""
    w = World(t=T, btu_s=600.0)
    w.op("M", cpu=512, memory=1024)  # n = 1 -> -1: migrate
    w.op("N", cpu=512, memory=1024)  # n = 1 -> -1: migrate
    w.op("C", cpu=4096, memory=7168)
    w.host("hA", "M", btu_end=T + 40.0)
    w.host("hB", "N", btu_end=T + 50.0)
    w.host("h2", "C")  # full
    actions = decide(w)
    assert [(a.kind, a.host, getattr(a, "target", None)) for a in actions] == [
        ("prolong", "hA", None), ("migrate", "hB", "hA"), ("release", "hB", None)]
