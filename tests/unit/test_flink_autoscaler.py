"""The Flink autoscaler (docs/flink-autoscaler.md) on the scenarios of upstream's own unit tests
(flink-autoscaler's JobVertexScalerTest and ScalingMetricEvaluatorTest), each with the numbers worked
out by hand, then the evaluation over a topology, both modes on hand-made snapshots and the
parameters."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from testbed.model import (
    HostView,
    InstanceState,
    InstanceView,
    OperatorType,
    OperatorView,
    ScaleTo,
    ScaleUp,
    Snapshot,
)
from testbed.policies.flink_autoscaler import (
    FlinkAutoscalerParams,
    FlinkAutoscalerPolicy,
    Rates,
    evaluate,
    true_rate,
)
from testbed.policies.flink_autoscaler_core import (
    BALANCED,
    EVENLY_SPREAD,
    Change,
    Evaluated,
    Settings,
    Summary,
    decide,
    joint,
    scale,
    thresholds,
)
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.sim.job import JobSimulation
from tests.conftest import compose_config
from tests.unit.test_job_sim import Flat

RESTART_S = 300.0  # restart.time's default
# JobVertexScalerTest's setup: no cap on the factors, no catch-up
BASE = Settings(max_scale_down_factor=1.0, max_scale_up_factor=2.0 ** 31 - 1, catch_up_s=0.0)
UNLIMITED = 2 ** 31 - 1


def ev(parallelism, target_rate, true_rate_, keyed=False, key_groups=720, catch_up=0.0, backlog=False):
    """JobVertexScalerTest's `evaluated(parallelism, targetDataRate, trueProcessingRate)`."""
    return Evaluated(parallelism, target_rate, catch_up, true_rate_, key_groups, keyed, backlog)


def change(s, e, now=0.0, last=None, delayed=None):
    c = decide(s, e, RESTART_S, now, last, {} if delayed is None else delayed, "v")
    return c.new, c.outside


# -- JobVertexScalerTest.testParallelismScaling -------------------------------------------------------

def test_scale_to_the_target_utilisation():
    s = replace(BASE, target_utilisation=1.0, scale_down_interval_s=0.0)
    assert change(s, ev(10, 50, 100)) == (5, True)  # 50 / 100 = 0.5 -> ceil(5.0)
    s = replace(s, target_utilisation=0.8)
    assert change(s, ev(10, 50, 100))[0] == 7  # 50 / 0.8 = 62.5 -> 63; 0.63 * 10 -> ceil(6.3)
    assert change(s, ev(10, 80, 100)) == (10, False)  # 80 / 0.8 = 100 = the true rate
    # 60 / 0.8 = 75 -> 7.5 -> 8; inside the bound: up threshold 60 / min(1.1, 1) = 60, down 60 / 0.5 = 120
    assert change(s, ev(10, 60, 100)) == (8, False)
    assert change(s, ev(10, 59, 100)) == (8, False)  # 59 / 0.8 = 73.75 -> 74 -> ceil(7.4)
    s = replace(s, target_utilisation=0.5)
    assert change(s, ev(2, 100, 40)) == (10, True)  # 100 / 0.5 = 200; 200 / 40 = 5 -> 10
    s = replace(s, target_utilisation=0.6)
    assert change(s, ev(2, 100, 100)) == (4, True)  # 100 / 0.6 = 166.7 -> 167; 1.67 * 2 -> ceil(3.34)


def test_max_scale_down_and_up_factors():
    s = replace(BASE, target_utilisation=1.0, scale_down_interval_s=0.0, max_scale_down_factor=0.5)
    assert change(s, ev(10, 10, 100)) == (5, True)  # factor 0.1 capped at 1 - 0.5
    assert change(replace(s, max_scale_down_factor=0.6), ev(10, 10, 100)) == (4, True)  # capped at 0.4
    s = replace(s, max_scale_up_factor=0.5)
    assert change(s, ev(10, 200, 10)) == (15, True)  # factor 20 capped at 1.5
    assert change(replace(s, max_scale_up_factor=0.6), ev(10, 200, 10)) == (16, True)  # capped at 1.6


# -- testParallelismComputation and testParallelismComputationWithAdjustment --------------------------

def test_parallelism_computation_without_key_groups():
    s = replace(BASE, max_parallelism=UNLIMITED)
    assert scale(s, 1, 0.0001, 720, False) == 1  # ceil(0.0001) = 1
    assert scale(s, 2, 0.1, 720, False) == 1  # ceil(0.2)
    assert scale(s, 6, 0.8, 720, False) == 5  # ceil(4.8)
    assert scale(s, 16, 1.5, 128, False) == 24
    assert scale(s, 200, 2.0, 720, False) == 400
    assert scale(s, 200, float(UNLIMITED), 720, False) == 720  # capped at the key groups


def test_parallelism_aligned_to_the_key_groups():
    s = replace(BASE, max_parallelism=UNLIMITED, alignment=EVENLY_SPREAD)
    assert scale(s, 6, 0.8, 36, True) == 6  # ceil(4.8) = 5 does not divide 36, 6 does: no change
    assert scale(s, 16, 1.5, 128, True) == 32  # 24 .. 31 do not divide 128
    assert scale(s, 200, 1.3, 720, True) == 360  # 260 .. 359 do not divide 720
    assert scale(s, 200, float(UNLIMITED), 720, True) == 720
    assert scale(s, 10, 2.5, 128, True) == 32  # 25 -> the next divisor of 128
    # balanced (upstream's default, as maximise-utilisation did): 128 // 26 = 4 < 128 // 25 = 5
    assert scale(replace(s, alignment=BALANCED, max_parallelism=128), 10, 2.5, 128, True) == 26


# -- testMinParallelismLimitIsUsed, testMaxParallelismLimitIsUsed -------------------------------------

def test_min_and_max_parallelism():
    s = replace(BASE, min_parallelism=5, scale_down_interval_s=0.0)
    # 100 / 0.7 = 142.86 -> 143; 143 / 500 * 10 -> ceil(2.86) = 3, raised to the minimum 5
    assert change(s, ev(10, 100, 500)) == (5, True)
    assert change(s, ev(4, 100, 500))[0] == 4  # below the minimum already: not raised
    s = replace(BASE, max_parallelism=10, target_utilisation=1.0)
    assert change(s, ev(10, 500, 100))[0] == 10  # 50 capped at the maximum 10
    assert change(s, ev(12, 500, 100))[0] == 12  # above the maximum already: kept


# -- the scale-down interval -------------------------------------------------------------------------

def test_scale_down_after_the_interval_takes_the_highest_recommendation():
    s = replace(BASE, target_utilisation=1.0, scale_down_interval_s=60.0)
    delayed: dict = {}
    assert change(s, ev(100, 800, 1000), 0.0, delayed=delayed)[0] == 100  # 80, first asked: delayed
    assert change(s, ev(100, 900, 1000), 10.0, delayed=delayed)[0] == 100  # 90
    assert change(s, ev(100, 720, 1000), 40.0, delayed=delayed)[0] == 100  # 72
    assert change(s, ev(100, 640, 1000), 59.0, delayed=delayed)[0] == 100  # 64
    # at 60 s the highest of the interval [0, 60] is 90 (asked at 10 s); inside the bound:
    # up threshold 900 / 1.0 = 900, down 900 / 0.7 = 1286
    assert change(s, ev(100, 700, 1000), 60.0, delayed=delayed) == (90, False)


def test_a_scale_up_or_no_change_cancels_a_delayed_scale_down():
    s = replace(BASE, target_utilisation=1.0, scale_down_interval_s=60.0)
    delayed: dict = {}
    change(s, ev(100, 800, 1000), 0.0, delayed=delayed)
    change(s, ev(100, 900, 1000), 10.0, delayed=delayed)
    assert change(s, ev(100, 1700, 1000), 12.0, delayed=delayed) == (170, True)  # at once
    assert delayed == {}
    change(s, ev(100, 800, 1000), 20.0, delayed=delayed)
    assert change(s, ev(100, 1000, 1000), 22.0, delayed=delayed)[0] == 100
    assert delayed == {}
    assert change(replace(s, scale_down_interval_s=0.0), ev(10, 50, 100)) == (5, True)  # interval off


# -- testIneffectiveScalingDetection -----------------------------------------------------------------

def test_ineffective_scale_up_is_blocked_when_detection_is_on():
    s = replace(BASE, target_utilisation=1.0, scale_down_interval_s=0.0, effectiveness_detection=True)
    assert change(s, ev(5, 100, 50)) == (10, True)  # expected rate 50 / 5 * 10 = 100
    last = Summary(5, 10, 50.0, 100.0)
    # effective (90 - 50) / (100 - 50) = 0.8: 180 / 90 * 10 = 20, expected 90 / 10 * 20 = 180
    assert change(s, ev(10, 180, 90), last=last) == (20, True)
    last = Summary(10, 20, 90.0, 180.0)
    assert change(s, ev(20, 180, 94), last=last)[0] == 20  # (94 - 90) / 90 = 4 %: blocked
    assert change(s, ev(20, 180, 98), last=last)[0] == 20  # 8 / 90 = 9 % < 10 %: blocked
    assert change(s, ev(10, 180, 90), last=last) == (20, True)  # rescaled by hand: not compared
    assert change(s, ev(20, 180, 100), last=last) == (36, True)  # 10 / 90 = 11 %: 1.8 * 20
    off = replace(s, effectiveness_detection=False)
    new = decide(off, ev(20, 180, 90), RESTART_S, 0.0, last, {}, "v")
    assert (new.new, "IneffectiveScaling" in new.reason) == (40, True)  # reported, not blocked
    assert change(s, ev(20, 45, 90), last=last) == (10, True)  # a scale-down is never blocked


# -- ScalingMetricEvaluatorTest.testUtilizationBoundaryComputation(WithRestartTimesTracking) ---------

def test_thresholds_with_catch_up_and_restart_time():
    s = Settings(target_utilisation=0.8, utilisation_max=0.9, utilisation_min=0.7, catch_up_s=0.0)

    def th(target, catch_up, restart=1.0, settings=s, backlog=False):
        return thresholds(settings, Evaluated(1, target, catch_up, 1.0, backlog=backlog), restart)

    assert th(700, 0) == (778.0, 1000.0)  # 700 / 0.9 = 777.8; 700 / 0.7; no catch-up: no restart term
    s2 = replace(s, catch_up_s=2.0)
    assert th(700, 350, settings=s2) == (1128.0, 1700.0)  # 350 + 777.8; 350 + 700 * 1 / 2 + 1000
    assert th(700, 0, settings=s2) == (778.0, 1350.0)
    # while processing a backlog the bounds are [0, 1]: 350 + 700 / 1 and infinity
    assert th(700, 350, settings=s2, backlog=True) == (1050.0, math.inf)
    assert th(700, 0, settings=s2, backlog=True) == (700.0, math.inf)
    # the tracked restart of 5 minutes with a catch-up of 1 minute: 350 + 700 * 300 / 60 + 1000
    s3 = replace(s, catch_up_s=60.0)
    assert th(700, 350, restart=300.0, settings=s3) == (1128.0, 4850.0)
    assert th(700, 0, restart=300.0, settings=s3) == (778.0, 4500.0)


def test_no_change_without_a_true_rate_and_the_joint_rule():
    assert change(BASE, ev(3, 10, math.nan)) == (3, False)
    assert true_rate(0.0, 0.5) == math.inf and true_rate(50.0, 0.5) == 100.0
    within = Change(4, 5, False, "")
    outside = Change(2, 3, True, "")
    assert joint({"a": within}) == {}  # every change within the bound: nothing scales
    assert joint({"a": within, "b": outside, "c": Change(1, 1, True, "")}) == {"a": within, "b": outside}


# -- the evaluation over a topology -------------------------------------------------------------------

def test_target_rates_propagate_along_the_output_ratios():
    p = FlinkAutoscalerParams(catch_up_s=100.0)
    rates = {"src": Rates(100.0, 0.5, 100.0, {}, 1000.0),  # 100/s in, queue 1000
             "mid": Rates(200.0, 0.4, 0.0, {"src": 200.0}, 50.0)}  # src emits 2 per item
    out = evaluate(["src", "mid"], rates, {"src": 2, "mid": 3}, {"src": False, "mid": True}, p)
    assert out["src"].target_rate == 100.0 and out["src"].catch_up_rate == 10.0  # 1000 / 100
    assert out["src"].true_rate == 200.0  # 100 / 0.5
    assert out["mid"].target_rate == 200.0  # 100 * 200 / 100
    assert out["mid"].catch_up_rate == 20.0 + 0.5  # 10 * 2, and its own queue 50 / 100
    strict = evaluate(["src", "mid"], rates, {"src": 2, "mid": 3}, {"src": False, "mid": True},
                      replace(p, queue_catch_up=False))
    assert strict["mid"].catch_up_rate == 20.0


# -- job mode -----------------------------------------------------------------------------------------

def job_snapshot(t, n, workload, throughput, cpu, lag=0.0, window=61):
    seconds = np.arange(t - window + 1, t + 1, dtype=float)
    return JobSnapshot(t=float(t), parallelism=n, max_scaleout=18, checkpoint_s=10.0, lag=lag, seconds=seconds,
                       workload=np.full(window, workload), throughput={f"w{i}": np.full(window, throughput / n)
                                                                       for i in range(n)},
                       cpu={f"w{i}": np.full(window, cpu) for i in range(n)}, uptime=seconds.copy())


def test_job_mode_waits_for_stabilisation_and_the_window_then_scales_up():
    p = FlinkAutoscalerParams(stabilization_s=60.0, metrics_window_s=120.0, interval_s=60.0)
    policy = FlinkAutoscalerPolicy(p)
    # 1100/s arrive, 2 workers at 90 % busy take 900/s: true rate 900 / 0.9 = 1000 < the scale-up
    # threshold 1100 / min(0.7 + 0.3, 1) = 1100, so outside the bound; capacity 1100 / 0.7 = 1571.4
    # + restart 1100 * 300 / 1800 = 183.3 -> 1755; 1.755 * 2 = 3.51 -> 4, which divides 128
    assert policy.decide_job(job_snapshot(60, 2, 1100.0, 900.0, 0.9)) == []  # stabilising
    assert policy.decide_job(job_snapshot(120, 2, 1100.0, 900.0, 0.9)) == []  # 60 s of 120 collected
    (action,) = policy.decide_job(job_snapshot(180, 2, 1100.0, 900.0, 0.9))
    assert isinstance(action, ScaleTo) and (action.operator, action.n) == (JOB_OPERATOR, 4)
    assert "parallelism 2 -> 4" in action.reason
    last = policy.last[JOB_OPERATOR]
    assert (last.current, last.new) == (2, 4)
    assert (last.true_rate, last.expected_rate) == pytest.approx((1000.0, 2000.0))  # expected: 1000 / 2 * 4
    assert policy.samples == {}  # the history starts afresh after a rescale


def test_job_mode_holds_inside_the_bound():
    p = FlinkAutoscalerParams(stabilization_s=0.0, metrics_window_s=60.0, interval_s=60.0)
    policy = FlinkAutoscalerPolicy(p)
    # 900/s at 90 % busy on 2: true rate 1000 within (900 / 1.0, 900 / 0.4 + 150): no change, although
    # the capacity 900 / 0.7 + 150 = 1436 would ask for 3
    assert policy.decide_job(job_snapshot(61, 2, 900.0, 900.0, 0.9)) == []


# -- parameters ---------------------------------------------------------------------------------------

def test_defaults_are_upstreams():
    p = FlinkAutoscalerParams()
    assert (p.metrics_window_s, p.stabilization_s, p.target_utilisation, p.utilisation_boundary) == (900, 300, 0.7, 0.3)
    assert (p.catch_up_s, p.restart_time_s, p.scale_down_interval_s) == (1800, 300, 3600)
    assert (p.max_scale_up_factor, p.max_scale_down_factor, p.min_parallelism, p.max_parallelism) == (
        100000.0, 0.6, 1, 200)
    assert (p.effectiveness_detection, p.effectiveness_threshold, p.alignment) == (False, 0.1, "BALANCED")
    p.validate()


@pytest.mark.parametrize("key, value", [
    ("metrics_window_s", 0.0), ("catch_up_s", -1.0), ("target_utilisation", 0.0), ("target_utilisation", 1.5),
    ("utilisation_max", 2.0), ("max_scale_down_factor", 1.5), ("min_parallelism", 0), ("max_parallelism", 0),
    ("alignment", "SOMETIMES"), ("busy_time_aggregator", "MEDIAN"), ("key_groups", 0),
    ("effectiveness_threshold", -0.1)])
def test_validation_names_the_field(key, value):
    with pytest.raises(ValueError, match=f"^{key}:"):
        replace(FlinkAutoscalerParams(), **{key: value}).validate()


# -- operator mode ------------------------------------------------------------------------------------

def operator_snapshot(t, processed_a, busy_a, queue_a=0):
    """Source -> A (two instances on one host) -> B, 15 s monitoring intervals."""
    types = {o: OperatorType(o, 1000.0, 256, 256, 100, stateful=False) for o in ("A", "B")}
    instances = (InstanceView("a1", "A", "h1", InstanceState.running, 0.0),
                 InstanceView("a2", "A", "h1", InstanceState.running, 0.0),
                 InstanceView("b1", "B", "h1", InstanceState.running, 0.0))
    host = HostView("h1", 4096, 8192, 4096 - 768, 8192 - 768, 0.0, 3600.0, frozenset(types), True, 1.0)
    ops = {"A": OperatorView(types["A"], 2, queue_a, processed=processed_a),
           "B": OperatorView(types["B"], 1, 0, processed=processed_a)}
    return Snapshot(t=t, operators=ops, hosts=(host,), instances=instances, btu_s=3600.0, reasoning_s=15.0,
                    penalty=0.0, input_rate=0.0, max_hosts=10, host_cpu=4096, host_memory=8192,
                    edges=(("source", "A"), ("A", "B")),
                    edge_items={("source", "A"): 300, ("A", "B"): processed_a},
                    instance_stats={"a1": (processed_a // 2, busy_a), "a2": (processed_a // 2, busy_a),
                                    "b1": (processed_a, 0.2)})


def test_operator_mode_scales_the_operator_that_falls_behind():
    p = FlinkAutoscalerParams(stabilization_s=0.0, metrics_window_s=30.0)
    policy = FlinkAutoscalerPolicy(p)
    assert policy.decide(operator_snapshot(15.0, 150, 1.0, 0)) == []  # 15 s of the 30 s window
    actions = policy.decide(operator_snapshot(30.0, 150, 1.0, 75))  # each sample covers its 15 s
    # A: 300 items per 15 s arrive (20/s), it processes 150 (10/s) fully busy: true rate 10/s < the
    # scale-up threshold 20 / 1.0; the queue 75 gives 75 / 1800 = 0.042/s to catch up; capacity
    # 0.042 + 20 * 300 / 1800 + 20 / 0.7 = 0.042 + 3.333 + 28.571 = 31.95 -> 32; 32 / 10 * 2 = 6.4 -> 7.
    # B: 10/s at 20 % busy: true rate 50/s; its target 20/s * (10 / 10) = 20/s: capacity 20/0.7 +
    # 3.33 = 31.9 -> 32 < 50: 32 / 50 * 1 -> ceil(0.64) = 1, no change
    ups = [a for a in actions if isinstance(a, ScaleUp)]
    assert len(ups) == 5 and {a.operator for a in ups} == {"A"}
    assert "A parallelism 2 -> 7" in ups[0].reason


def test_job_mode_on_the_simulator_scales_up_once_the_window_is_full():
    # the flat load is 0.9 of what 12 workers take: the busiest worker ~0.91 busy, true rate about
    # 1300 / 0.91 = 1430/s, below the scale-up threshold 1300 / (0.5 + 0.1) = 2167; capacity
    # 1300 / 0.5 + 1300 * 300 / 1800 = 2817, factor ~1.97: ceil(12 * 1.97) = 24, and the job has 18 at most
    cfg = compose_config("evaluation=daedalus", "duration_min=10", "job.latency_samples=600")
    p = FlinkAutoscalerParams(stabilization_s=60.0, metrics_window_s=120.0, interval_s=10.0,
                              target_utilisation=0.5, utilisation_boundary=0.1)
    res = JobSimulation(cfg, FlinkAutoscalerPolicy(p), Flat(1300.0, 600), seed=3).run()
    r = res.tables["rescales"]
    assert (r["from_n"], r["to_n"]) == ([12], [18])
    assert any("capped at the maximum scale-out 18" in why for why in res.tables["actions"]["reason"])
    assert r["t_s"] == [180.0]  # 60 s stabilising, then 120 s of metrics (decided every 10 s)


def test_tracked_restart_time_is_the_longest_measured_within_the_limit():
    p = FlinkAutoscalerParams(restart_time_tracking=True, restart_time_tracking_limit_s=200.0)
    policy = FlinkAutoscalerPolicy(p)
    assert policy.restart_time() == 300.0  # nothing measured yet: restart.time
    policy.restarts, policy.restart_s = [180.0], 40.0
    assert policy.restart_time() == 180.0
    policy.restarts = [180.0, 250.0]
    assert policy.restart_time() == 200.0  # capped by the limit
    assert FlinkAutoscalerPolicy(FlinkAutoscalerParams()).restart_time() == 300.0


def test_a_source_backlog_over_the_threshold_widens_the_bounds():
    p = FlinkAutoscalerParams()  # 300 s of lag at the input rate
    rates = {"src": Rates(100.0, 0.5, 100.0, {}, 30_001.0)}  # 300.01 s of lag
    assert evaluate(["src"], rates, {"src": 2}, {"src": False}, p)["src"].backlog
    rates = {"src": Rates(100.0, 0.5, 100.0, {}, 30_000.0)}  # exactly 300 s: not over it
    assert not evaluate(["src"], rates, {"src": 2}, {"src": False}, p)["src"].backlog


def test_the_configuration_takes_the_settings_and_names_a_bad_one():
    from testbed.arguments import ConfigError
    from testbed.config import to_typed, validate

    cfg = to_typed(compose_config("policy=flink_autoscaler", "reps=1", "policies.flink_autoscaler.utilisation_max=0.9",
                                  "policies.flink_autoscaler.alignment=EVENLY_SPREAD"))
    validate(cfg)
    assert (cfg.policies["flink_autoscaler"].utilisation_max, cfg.policies["flink_autoscaler"].alignment) == (
        0.9, EVENLY_SPREAD)
    with pytest.raises(ConfigError, match="policies.flink_autoscaler.max_scale_down_factor"):
        bad = compose_config("policy=flink_autoscaler", "policies.flink_autoscaler.max_scale_down_factor=2")
        validate(to_typed(bad))
