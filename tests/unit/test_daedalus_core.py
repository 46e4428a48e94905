"""Daedalus' pure parts on hand-computed states (docs/papers/daedalus.md): the regression and both
Welford forms, both skew rules, capacity bookkeeping, WAPE, the fallback and the retrain counters,
recovery-time prediction in paper and code semantics, every branch of Algorithm 1, anomaly groups."""
from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.policies.daedalus.anomaly import bridged, group_lengths, observed_recovery, recovery_end
from testbed.policies.daedalus.capacity import CapacityModel, Regression, SkewRule, WelfordMode, skew_inputs
from testbed.policies.daedalus.decision import DecisionInputs, DecisionSettings, LagCheck, plan
from testbed.policies.daedalus.forecast import (
    Forecaster,
    ForecastMode,
    RetrainCounter,
    applied,
    auto_arima,
    choose,
    linear_fallback,
    wape,
)
from testbed.policies.daedalus.recovery import RtSemantics, predict_recovery_time

# -- regression ------------------------------------------------------------------------------

def test_exact_welford_gives_population_moments():
    r = Regression()
    r.add_all([0.2, 0.4, 0.6], [100, 180, 300])
    # mX 0.4, mY 580/3; var = 0.08/3; cov = (0.2*93.33 + 0.2*106.67)/3 = 40/3; beta 500
    assert r.n == 3
    assert r.mx == pytest.approx(0.4)
    assert r.my == pytest.approx(580 / 3)
    assert r.var == pytest.approx(0.08 / 3)
    assert r.cov == pytest.approx(40 / 3)
    assert r.beta == pytest.approx(500.0)
    assert r.alpha == pytest.approx(580 / 3 - 200)
    assert r.capacity(1.0) == pytest.approx(580 / 3 + 300)


def test_code_batch_welford_uses_old_means_and_one_n():
    r = Regression()
    r.add_all([0.2, 0.4, 0.6], [100, 180, 300], WelfordMode.batch_code)
    # n = 3, f = 2/3, dx = xs, dy = ys: var = (2/3 * 0.56)/3, cov = (2/3 * 272)/3
    assert r.var == pytest.approx(2 / 3 * 0.56 / 3)
    assert r.cov == pytest.approx(2 / 3 * 272 / 3)
    assert r.beta == pytest.approx(272 / 0.56)
    assert (r.mx, r.my) == (pytest.approx(0.4), pytest.approx(580 / 3))
    # a second batch of one sample equals the exact update (one sample, same n)
    exact, batch = Regression(), Regression()
    exact.add(0.5, 10.0)
    exact.add(0.7, 30.0)
    batch.add_all([0.5], [10.0], WelfordMode.batch_code)
    batch.add_all([0.7], [30.0], WelfordMode.batch_code)
    assert (batch.var, batch.cov) == (pytest.approx(exact.var), pytest.approx(exact.cov))


def test_regression_without_cpu_spread_is_the_ratio_through_the_origin():
    r = Regression()
    r.add_all([0.5, 0.5], [100, 300])
    assert r.var == 0
    assert r.capacity(1.0) == pytest.approx(400.0)


def test_skew_rules():
    cpu = {"a": 0.8, "b": 0.6, "c": 0.4}
    assert skew_inputs(cpu, SkewRule.proportional) == {"a": 1.0, "b": pytest.approx(0.75), "c": pytest.approx(0.5)}
    assert skew_inputs(cpu, SkewRule.offset) == {"a": 1.0, "b": pytest.approx(0.8), "c": pytest.approx(0.6)}


# -- capacity bookkeeping ----------------------------------------------------------------------

def _two_workers(model: CapacityModel, p: int = 2) -> int:
    # both workers: throughput = 1000 * CPU; a at mean CPU 0.5, b at 0.25
    return model.update({"a": [0.25, 0.75], "b": [0.125, 0.375]},
                        {"a": [250.0, 750.0], "b": [125.0, 375.0]}, p)


def test_capacity_bookkeeping_proportional():
    m = CapacityModel(max_scaleout=4)
    assert m.capacity(2) == 0  # nothing known yet
    assert _two_workers(m) == 1500  # a at x = 1 -> 1000, b at x = 0.5 -> 500
    assert m.observed == {2: 1500}
    assert m.estimated == {1: 750, 2: 1500, 3: 2250, 4: 3000}
    assert [m.capacity(p) for p in range(0, 5)] == [0, 750, 1500, 2250, 3000]
    # the next loop's C_cur is averaged into the observed value, int((1500 + c) / 2)
    m2 = CapacityModel(max_scaleout=4)
    _two_workers(m2)
    c = m2.update({"a": [1.0, 0.0], "b": [0.125, 0.125]}, {"a": [1000.0, 0.0], "b": [125.0, 125.0]}, 2)
    # still y = 1000x for both; window means a 0.5, b 0.125 -> x_b = 0.25: C_cur = 1000 + 250
    assert c == 1250
    assert m2.observed[2] == int((1500 + 1250) / 2)
    assert m2.estimated[3] == int(3 * 1250 / 2)


def test_capacity_offset_rule_and_workers_that_leave():
    m = CapacityModel(max_scaleout=3, skew_rule=SkewRule.offset)
    assert _two_workers(m) == 1750  # b at x = 1 - (0.5 - 0.25) = 0.75
    m.update({"a": [0.5]}, {"a": [500.0]}, 1)  # b is gone: its model goes
    assert set(m.models) == {"a"}
    assert m.observed == {2: 1750, 1: 1000}
    assert m.capacity(2) == 1750  # observed wins over the estimate 2000
    assert m.capacity(3) == 3000


# -- forecasting -------------------------------------------------------------------------------

def test_wape():
    assert wape([100, 200, 100], [110, 180, 100, 999]) == pytest.approx(30 / 400)
    assert wape([], [1, 2]) == math.inf
    assert wape([0, 0], [1, 2]) == math.inf


def test_linear_fallback_extrapolates_the_window():
    assert linear_fallback([1, 3, 5], 2).tolist() == pytest.approx([7, 9])
    assert linear_fallback([4], 3).tolist() == [4, 4, 4]


def test_choose_forecast():
    arima = np.array([1.0, 2.0])
    f, kind = choose(0.2, arima, [1, 3, 5], 2)
    assert kind == "arima" and f is arima
    f, kind = choose(0.25, arima, [1, 3, 5], 2)
    assert kind == "linear" and f.tolist() == pytest.approx([7, 9])
    assert choose(0.0, None, [2, 2], 3)[1] == "linear"


def test_retrain_counter_paper_resets_on_retrain():
    c = RetrainCounter()  # 0.25, 15, reset
    assert [c.observe(0.3) for _ in range(14)] == [False] * 14
    assert c.observe(0.25) is True and c.count == 0 and c.retrains == 1
    assert c.observe(0.3) is False and c.count == 1
    c.observe(0.24)
    assert c.count == 0


def test_retrain_counter_code_repeats_every_loop():
    c = RetrainCounter(threshold=0.10, repeat=True)
    assert [c.observe(0.12) for _ in range(15)] == [False] * 14 + [True]
    assert c.observe(0.5) is True and c.count == 16 and c.retrains == 2
    assert c.observe(0.09) is False and c.count == 0


@pytest.mark.slow
def test_forecaster_first_loop_falls_back_then_uses_arima():
    f = Forecaster(mode=ForecastMode.fast, horizon=30, fallback_horizon=20, history_s=200)
    ramp = 1000.0 + 10.0 * np.arange(200)
    out, kind = f.loop(ramp[:61], ramp[:61])
    assert kind == "linear" and f.error == math.inf and len(out) == 20  # no previous forecast: WAPE = inf
    assert out[0] == pytest.approx(1610.0)
    out, kind = f.loop(ramp[61:121], ramp[60:121])
    assert f.error < 0.01 and kind == "arima" and len(out) == 30
    assert f.counter.count == 0  # the first loop's inf counted once, the good one reset it


@pytest.mark.slow
def test_the_filtered_application_forecasts_as_statsmodels_apply_to_the_bit():
    rng = np.random.default_rng(3)
    steps = np.repeat([100.0, 250.0, 400.0, 180.0], 150) + rng.poisson(20, 600)
    model = auto_arima(steps[:400])
    for start in (0, 90, 200):
        history = steps[start:start + 400]
        ours = np.asarray(applied(model, history).forecast(120))
        theirs = np.asarray(model.arima_res_.apply(history).forecast(120))
        assert ours.tobytes() == theirs.tobytes()


# -- recovery time -----------------------------------------------------------------------------

def test_recovery_time_paper_and_code():
    f = [100.0] * 20
    # B = 50 + 2*100 = 250; extra 50 per second; cumsum > 250 first at k = 5
    assert predict_recovery_time(150, f, 50, 2) == 2 + 5 + 1
    assert predict_recovery_time(150, f, 50, 2, semantics=RtSemantics.code) == 5 + 2 * 2
    assert predict_recovery_time(150, f, 50, 2, lag=100) == 2 + 7 + 1  # B = 350
    assert predict_recovery_time(100, f, 50, 2) == 3600 + 2  # never catches up: invalid
    assert predict_recovery_time(150, [100.0] * 6, 50, 2) == 3602  # beyond the horizon


# -- Algorithm 1 -------------------------------------------------------------------------------

CAP = {1: 80, 2: 200, 3: 300, 4: 400}
SET = DecisionSettings(max_scaleout=4)


def _inputs(**kw) -> DecisionInputs:
    base = dict(t=1000.0, p_cur=3, last_rescale=-math.inf, workload=100, forecast=[100.0] * 900,
                capacity=lambda p: CAP.get(p, 0), lag=0.0, replay=0.0, downtime_out=30, downtime_in=15)
    base.update(kw)
    return DecisionInputs(**base)


def test_grace_period_blocks_any_action():
    assert plan(_inputs(last_rescale=821.0), SET).branch == "grace"  # 179 s ago
    assert plan(_inputs(last_rescale=820.0), SET).branch != "grace"


def test_unknown_capacity_blocks_any_action():
    d = plan(_inputs(capacity=lambda p: 0), SET)
    assert (d.target, d.branch) == (None, "unknown")


def test_keep_rule_within_600_s():
    d = plan(_inputs(last_rescale=500.0), SET)
    assert (d.target, d.branch) == (3, "keep")
    # the keep rule looks 60 s ahead only: a peak after 60 s does not break it, one within does
    assert plan(_inputs(last_rescale=500.0, forecast=[100.0] * 60 + [350.0] * 840), SET).branch == "keep"
    d = plan(_inputs(last_rescale=500.0, forecast=[100.0] * 59 + [350.0] * 841), SET)
    assert d.branch != "keep"
    assert plan(_inputs(last_rescale=400.0), SET).branch != "keep"  # 600 s ago


def test_smallest_candidate_that_covers_the_forecast():
    d = plan(_inputs(), SET)
    # i = 1: 80 <= W; i = 2: B = 15*100, extra 100/s -> j = 15, RT = 15 + 15 + 1 = 31
    assert (d.target, d.branch) == (2, "candidate")
    assert d.rt == {2: 31}


def test_scale_in_lag_check_paper_vs_code():
    d = plan(_inputs(lag=250.0), SET)  # paper: C(2) = 200 < lag -> i = 2 skipped; i = 3 is current
    assert (d.target, d.branch) == (3, "current")
    assert d.rt[3] == 30 + 15 + 1  # B = 30*100, extra 200/s -> j = 15
    code = DecisionSettings(max_scaleout=4, lag_check=LagCheck.current)
    assert plan(_inputs(lag=250.0), code).target == 2  # code: C(p_cur) = 300 >= lag


def test_rt_target_and_max_scaleout_fallback():
    strict = DecisionSettings(max_scaleout=4, rt_target_s=30)
    d = plan(_inputs(), strict)  # RTs 31, 46, 41 all > 30
    assert (d.target, d.branch) == (4, "max")
    assert d.rt == {2: 31, 3: 46, 4: 41}


def test_candidate_must_carry_the_forecast_while_recovering():
    f = [100.0] * 3 + [350.0] * 2 + [100.0] * 895
    settings = DecisionSettings(max_scaleout=2)
    d = plan(_inputs(p_cur=1, forecast=f, capacity=lambda p: {1: 300}.get(p, 0), replay=1000.0, downtime_out=1),
             settings)
    # i = 1: B = 1000 + 100, extra 200, 200, 0, 0, 200, ... -> j = 7, RT = 9; max(F[:9]) = 350 > 300
    assert d.rt == {1: 9}
    assert (d.target, d.branch) == (2, "max")


def test_current_is_kept_without_covering_the_whole_forecast():
    f = [100.0] * 100 + [1000.0] * 800
    d = plan(_inputs(forecast=f), SET)  # 2 does not cover max(F); 3 is current and carries F[:RT]
    assert (d.target, d.branch) == (3, "current")


def test_larger_candidate_must_exceed_the_forecast_maximum():
    f = [100.0] * 100 + [350.0] * 800
    d = plan(_inputs(p_cur=1, forecast=f), SET)  # 2 and 3 do not cover 350, 4 does
    assert (d.target, d.branch) == (4, "candidate")


# -- anomaly detection -------------------------------------------------------------------------

def test_anomaly_groups_bridge_gaps_of_up_to_30_s():
    flags = np.array([True] * 5 + [False] * 30 + [True] * 2 + [False] * 40)
    b = bridged(flags)
    assert group_lengths(b) == [5 + 30 + 2 + 30]
    assert group_lengths(bridged(np.array([True] + [False] * 31 + [True] + [False] * 40))) == [31, 31]


def test_observed_recovery_and_monitor_end():
    diffs = [1000.0] * 20 + [-500.0] * 20 + [0.0] * 60
    # mean 0 and std 10: the first 40 samples are one group of 40 + 30 -> observed RT 40
    assert observed_recovery(diffs, 0.0, 10.0) == pytest.approx(40.0)
    # checks at 30, 35, 40: sample 40 is the first normal one checked
    assert recovery_end(diffs, 0.0, 10.0) == 40
    assert recovery_end(diffs[:40], 0.0, 10.0) is None


# -- the controller's loop ---------------------------------------------------------------------

def test_ewma1m_workload_is_the_brokers_one_minute_rate():
    from testbed.policies.daedalus.controller import EWMA_ALPHA
    from testbed.policies.daedalus.policy import DaedalusParams

    c = DaedalusParams(workload_metric="ewma1m").controller()
    seconds = np.arange(1.0, 11.0)
    series = c._workload_series(seconds, np.array([5.0] * 5 + [10.0] * 5), np.ones(10, dtype=bool))
    # ticks at 5 s (rate 25/5 = 5: the first value) and 10 s (rate 50/5 = 10: 5 + alpha * 5)
    assert series[:9].tolist() == [5.0] * 9
    assert series[9] == pytest.approx(5.0 + EWMA_ALPHA * 5.0)
    assert EWMA_ALPHA == pytest.approx(1 - math.exp(-5 / 60))


@pytest.mark.slow
def test_controller_drops_warm_up_samples_and_rescales_when_capacity_is_known():
    from testbed.policies.daedalus.controller import LoopWindow
    from testbed.policies.daedalus.policy import DaedalusParams

    c = DaedalusParams().controller()
    sec = np.arange(60.0, 121.0)  # uptime 60..120 s: only the last second is warm
    cpu = {"w0": np.full(61, 0.5), "w1": np.full(61, 0.25)}
    thr = {"w0": np.full(61, 500.0), "w1": np.full(61, 250.0)}
    out = c.loop(LoopWindow(t=120.0, p_cur=2, lag=0.0, checkpoint_s=30.0, seconds=sec, workload=np.full(61, 750.0),
                            throughput=thr, cpu=cpu, uptime=sec))
    assert c.capacity.models["w0"].n == 1 and c.capacity.models["w1"].n == 1  # 120 s only
    # var 0: ratio through the origin, 1000 items/s per CPU; w1 at x = 0.5 -> C(2) = 1000 + 500
    assert c.capacity.capacity(2) == 1500
    # W = 750: C(1) = 750 does not exceed it; 2 is current -> no action (first loop: linear forecast of 750s)
    assert out.target is None and out.decision.branch == "current"
