"""The Daedalus report's savings and claims on hand-made results (reporting/evaluations/daedalus/)."""
from __future__ import annotations

import math

import pandas as pd

from reporting.evaluations.daedalus.claims import check_claims
from reporting.evaluations.daedalus.measures import comparison, load_reference, results


def _runs(rows):
    base = {m: math.nan
            for m in ("latency_p95_ms", "latency_p95_time_avg_ms", "latency_max_ms", "rescales", "workers_per_12",
                                   "capacity_error_pct", "forecast_wape_median", "forecast_wape_below_5_pct",
                                   "fallback_loops", "rt_predicted_s", "rt_observed_s", "rt_true_s",
                                   "rt_predicted_ge_observed_pct", "rt_predicted_ge_true_pct",
                                   "excess_workers_falling", "excess_workers_rising")}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_savings_against_every_other_configuration():
    runs = _runs([
        {"pattern": "wc_sine", "config": "daedalus", "rep": 1, "mean_workers": 5.0, "latency_ms": 1200.0,
         "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "daedalus", "rep": 2, "mean_workers": 7.0, "latency_ms": 1000.0,
         "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "hpa-80", "rep": 1, "mean_workers": 8.0, "latency_ms": 1800.0,
         "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "hpa-85", "rep": 1, "mean_workers": 7.5, "latency_ms": 900.0, "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "static-12", "rep": 1, "mean_workers": 12.0, "latency_ms": 1400.0,
         "keeps_up": 1.0},
    ])
    res = results(runs)
    saved = res[(res.metric == "workers_saved_pct") & (res.config == "daedalus")].set_index("against")["mean"]
    assert saved["static-12"] == 50.0  # (12 - 6) / 12
    assert saved["hpa-80"] == 25.0  # (8 - 6) / 8
    assert saved["hpa-85"] == 20.0  # (7.5 - 6) / 7.5
    wc = res[(res.config == "daedalus") & (res.metric == "mean_workers")].iloc[0]
    assert (wc["mean"], round(wc["sd"], 6), wc["n"]) == (6.0, round(math.sqrt(2.0), 6), 2)
    claims = check_claims(res).set_index("claim")
    # fewer workers than all three; latency 1100 lies between 900 and 1800 and below 1400
    assert claims.loc["D1", "verdict"] == "holds"
    assert claims.loc["D2", "verdict"] == "not measured"
    comp = comparison(res, load_reference())
    row = comp[comp.approach == "hpa-80"].iloc[0]
    assert (row.paper_workers, row.measured_workers, row.paper_saved_pct,
            row.measured_saved_pct) == (7.8, 8.0, 31.0, 25.0)


def test_d1_fails_when_daedalus_latency_is_above_static():
    runs = _runs([
        {"pattern": "wc_sine", "config": "daedalus", "rep": 1, "mean_workers": 6.0, "latency_ms": 5000.0,
         "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "hpa-80", "rep": 1, "mean_workers": 8.0, "latency_ms": 1800.0,
         "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "hpa-85", "rep": 1, "mean_workers": 7.5, "latency_ms": 900.0, "keeps_up": 1.0},
        {"pattern": "wc_sine", "config": "static-12", "rep": 1, "mean_workers": 12.0, "latency_ms": 1400.0,
         "keeps_up": 1.0},
    ])
    claims = check_claims(results(runs)).set_index("claim")
    assert claims.loc["D1", "verdict"] == "does not hold"
    assert "between the HPAs False" in claims.loc["D1", "evidence"]


def test_capacity_claim_names_each_workload_beside_its_own_error():
    # no capacity error on wc_sine (NaN), 2.5 % on ysb_avazu and 7 % on tm_two_spike: the evidence pairs
    # each value with its own workload, and the 7 % makes D6 fail
    runs = _runs([{"pattern": p, "config": "daedalus", "rep": 1, "mean_workers": 5.0, "latency_ms": 1000.0,
                   "keeps_up": 1.0, "capacity_error_pct": err}
                  for p, err in (("wc_sine", math.nan), ("ysb_avazu", 2.5), ("tm_two_spike", 7.0))])
    d6 = check_claims(results(runs)).set_index("claim").loc["D6"]
    assert d6["evidence"].endswith("per workload: ysb_avazu 2.5 %, tm_two_spike 7.0 %")
    assert d6["verdict"] == "does not hold"


def test_the_paper_comparison_pairs_each_run_with_daedalus_on_its_own_backend():
    # the backend column (the runs' manifests) says which Daedalus an HPA is compared with
    runs = _runs([
        {"pattern": "wc_sine", "config": c, "backend": b, "rep": 1, "mean_workers": w, "latency_ms": 1000.0,
         "keeps_up": 1.0}
        for c, b, w in (("daedalus", "sim", 6.0), ("hpa-80", "sim", 8.0),
                        ("daedalus-flink", "flink", 2.0), ("hpa-80-flink", "flink", 4.0))])
    comp = comparison(results(runs), load_reference()).set_index("approach")
    assert comp.loc["hpa-80", "measured_saved_pct"] == 25.0  # (8 - 6) / 8
    assert comp.loc["hpa-80-flink", "measured_saved_pct"] == 50.0  # (4 - 2) / 4
    assert comp.loc["hpa-80-flink", "paper_workers"] == 7.8  # the paper's hpa-80
    # without the column, "hpa-80-flink" is a configuration of its own name: the paper has none
    unnamed = comparison(results(runs.drop(columns="backend")), load_reference()).set_index("approach")
    assert math.isnan(unnamed.loc["hpa-80-flink", "paper_workers"])
