"""The `compare` evaluation's report: Pareto front, leaderboards from results.csv rows built by
hand, the reasons summary, and the evaluation end to end at a small scale."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from reporting.evaluations.compare import leaderboard, pareto_front, reason_summary
from testbed.eventlog import EventLog


def test_pareto_front_keeps_the_undominated_points():
    cost = [10.0, 12.0, 8.0, 12.0, 9.0, math.nan]
    compliance = [50.0, 60.0, 40.0, 55.0, 40.0, 90.0]
    # 3 (12, 55) is dominated by 1 (12, 60); 4 (9, 40) by 2 (8, 40); NaN is never on the front
    assert pareto_front(cost, compliance) == [True, True, True, False, False, False]


def rows(config, btu, **metrics):
    return [{"pattern": "stepwise", "approach": config.split("-")[0], "btu_minutes": btu, "metric": m, "mean": v,
             "sd": None, "n": 3, "config": config} for m, v in metrics.items()]


def test_leaderboard_bills_each_approach_under_the_btu_it_is_compared_in():
    summary = pd.DataFrame(
        # the baseline re-billed under 10 and 60; its compliance has no BTU length
        rows("threshold", 10, resource_cost=18.0, realtime_total_cost=43.0, scale_ups=100, scale_downs=70)
        + rows("threshold", 60, resource_cost=42.0, realtime_total_cost=67.0, scale_ups=100, scale_downs=70)
        + rows("threshold", None, realtime_compliance_pct=42.0)
        # billed by its own 10-minute BTU only
        + rows("btu-10", 10, resource_cost=18.0, realtime_total_cost=40.0, realtime_compliance_pct=47.0,
               scale_ups=150, scale_downs=104)
        + rows("hpa-80", 10, resource_cost=7.0, realtime_total_cost=15.0, scale_ups=30, scale_downs=22)
        + rows("hpa-80", 60, resource_cost=18.0, realtime_total_cost=26.0, scale_ups=30, scale_downs=22)
        + rows("hpa-80", None, realtime_compliance_pct=53.5))
    at10 = leaderboard(summary, "stepwise", 10)
    assert at10["config"].tolist() == ["hpa-80", "btu-10", "threshold"]  # by real-time total cost
    assert at10["rescales"].tolist() == [52, 254, 170]
    assert at10["realtime_compliance_pct"].tolist() == [53.5, 47.0, 42.0]
    assert at10["pareto"].tolist() == [True, False, False]  # hpa: cheapest and most compliant
    at60 = leaderboard(summary, "stepwise", 60)
    assert at60["config"].tolist() == ["hpa-80", "threshold"]  # btu-10 is not billed in 60-minute BTUs
    assert at60["resource_cost"].tolist() == [18.0, 42.0]
    assert leaderboard(summary, "stepwise", 30).empty


def test_reasons_are_counted_per_run_with_numbers_masked(tmp_path):
    runs = []
    for rep, reasons in ((1, ["queue 37 > 30", "queue 41 > 30", "idle for 120 s"]), (2, ["queue 12 > 10"])):
        folder = tmp_path / str(rep)
        folder.mkdir()
        n = len(reasons)
        EventLog(folder).write("actions", {
            "t_s": [0.0] + [60.0 * (i + 1) for i in range(n)],
            "action": ["scale_up"] + ["scale_up" if r.startswith("queue") else "scale_down" for r in reasons],
            "operator": ["O1"] * (n + 1), "instance": [f"i{i}" for i in range(n + 1)], "host": ["vm1"] * (n + 1),
            "target_host": [None] * (n + 1), "reason": ["initial deployment"] + reasons, "policy": ["x"] * (n + 1)})
        runs.append(SimpleNamespace(run_dir=folder, config="threshold", pattern="stepwise"))
    [row] = reason_summary(runs).to_dict("records")
    # the initial deployment (t = 0) is not a scaling decision; 3 queue decisions and 1 idle over 2 runs
    assert row["actions per run"] == "scale_down 0.5, scale_up 1.5"
    assert row["top reasons per run"] == "queue # > # (1.5); idle for # s (0.5)"


@pytest.mark.slow
def test_the_compare_evaluation_runs_every_approach(tmp_path):
    from testbed.experiment import run_experiment
    from tests.conftest import compose_config

    cfg = compose_config("evaluation=compare", "reps=1", "duration_min=10", f"out={tmp_path}")
    names = [c.name for c in cfg.evaluation.configurations]
    assert {"threshold", "btu-60", "btu-60-odp", "presps", "daedalus", "hpa-80", "ds2",
            "flink_autoscaler"} <= set(names)
    done = run_experiment(cfg)
    assert len(done) == len(names)
