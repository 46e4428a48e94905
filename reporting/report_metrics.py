"""The report's metrics per run and their mean, sd and n per configuration, from the Spark stage's
aggregates (reporting.spark_passes).

The metrics come from the same functions as the pandas summary's (`metrics_from_totals` and
`long_rows` of reporting.metrics, `mean_sd` of reporting.summary), fed with the totals Spark
computed; the report adds per-operator compliance and time to adapt, the elasticity metrics
(reporting.elasticity) and the mean operator instances and leased VMs, all BTU-independent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import pandas as pd

from reporting.elasticity import DEMAND_SUPPLY_METRICS, ELASTICITY_METRICS, elasticity_metrics
from reporting.evaluations import evaluation_metrics, metric_order
from reporting.metrics import (
    BTU_INDEPENDENT_METRICS,
    LEVELS,
    METRICS,
    RunTotals,
    SummaryError,
    long_rows,
    metrics_from_totals,
)
from reporting.run_catalog import ReportError, RunCatalog, RunInfo
from reporting.spark_passes import LEASE_COLUMNS, Aggregates
from reporting.summary import mean_sd

RUN_LEVEL_EXTRA_METRICS: Tuple[str,
                               ...] = (*ELASTICITY_METRICS, *DEMAND_SUPPLY_METRICS, "mean_instances", "mean_leased_vms")
PER_RUN_COLUMNS = ["pattern", "approach", "config", "backend", "rep", "btu_minutes", "metric", "value"]
_COUNTS = ["n", *(f"ok_{level}" for level, _ in LEVELS)]


def compliance_metric(level: str, operator: str) -> str:
    return f"{level}_compliance_{operator}_pct"


def metric_rank(metric: str) -> Tuple[int, int, str]:
    """Report order: summary's metrics, the run-level extras, then per-operator metrics by kind."""
    known = [*METRICS, *RUN_LEVEL_EXTRA_METRICS, *metric_order()]
    if metric in known:
        return (0, known.index(metric), "")
    kinds = [*(f"{level}_compliance_" for level, _ in LEVELS), "time_to_adapt_",
             *(m.rsplit("_", 1)[0] + "_" for m in ELASTICITY_METRICS)]
    for i, prefix in enumerate(kinds):
        if metric.startswith(prefix):
            return (1, i, metric)
    return (2, 0, metric)


@dataclass
class ReportMetrics:
    per_run: pd.DataFrame  # PER_RUN_COLUMNS: one value per run, BTU length (if any) and metric
    summary: pd.DataFrame  # reporting.summary.COLUMNS: mean, sd, n over repetitions


def spark_mean_sd(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and sample sd as Spark's avg and stddev_samp compute them on one partition: the sum in
    order divided by n, and Welford's update of the variance (identical values: sd exactly 0)."""
    n, mean, m2 = 0, 0.0, 0.0
    for x in values:
        n += 1
        delta = x - mean
        delta_n = delta / n
        mean += delta_n
        m2 += delta * (delta - delta_n)
    if n == 0:
        return math.nan, math.nan
    return sum(values) / n, math.sqrt(m2 / (n - 1)) if n > 1 else math.nan


def _ratio(num: float, den: float) -> float:
    """num / den; NaN when den is 0 (Spark's try_divide)."""
    return num / den if den else math.nan


def _mean_over_intervals(per_minute: pd.DataFrame, column: str) -> float:
    return _ratio(float(per_minute[column].sum()), float(per_minute["intervals"].sum()))


def _run_values(run: RunInfo, part: Dict[str, pd.DataFrame]) -> Dict[str, object]:
    """All metrics of one run (run_metrics's layout: BTU-independent ones at the top, costs in
    "by_btu"), from its rows of each aggregate."""
    counts = part["compliance"].groupby("operator")[_COUNTS].sum()
    episodes = part["episodes"].set_index("operator").reindex(counts.index)
    # mean over every episode of every operator
    time_to_adapt = _ratio(float(episodes["episode_sum"].sum(min_count=1)), float(episodes["episodes"].sum()))
    actions = dict(zip(part["actions"]["action"], part["actions"]["n"], strict=True))
    totals = RunTotals(counts, int(part["items"]["items"].sum()), actions, time_to_adapt,
                       part["leases"][LEASE_COLUMNS].reset_index(drop=True))
    try:
        values: Dict[str, object] = metrics_from_totals(totals, run.manifest, run.run_dir)
    except SummaryError as exc:
        raise ReportError(str(exc)) from exc
    for operator, row in counts.iterrows():
        for level, _ in LEVELS:
            values[compliance_metric(level, str(operator))] = 100.0 * _ratio(float(row[f"ok_{level}"]), float(row["n"]))
    for operator, row in episodes.iterrows():
        values[f"time_to_adapt_{operator}_s"] = _ratio(float(row["episode_sum"]), float(row["episodes"]))
    per_run, per_operator = elasticity_metrics(part["elasticity"].sort_values("operator"))
    values.update(per_run)
    values.update(per_operator)
    values.update(evaluation_metrics(run.run_dir, run.manifest))  # the evaluation's own (reporting.evaluations)
    values["mean_instances"] = _mean_over_intervals(part["instances"], "instances")
    values["mean_leased_vms"] = _mean_over_intervals(part["hosts"], "leased")
    return values


def report_metrics(catalog: RunCatalog, aggregates: Aggregates) -> ReportMetrics:
    """The metrics of the catalog's complete runs: per run, then mean/sd/n per configuration."""
    empty = {name: frame.iloc[0:0] for name, frame in vars(aggregates).items()}
    by_run = {name: dict(tuple(frame.groupby("run_id"))) for name, frame in vars(aggregates).items()}
    rows: List[Dict[str, object]] = []
    for run in catalog.complete:
        part = {name: runs.get(run.run_id, empty[name]) for name, runs in by_run.items()}
        values = _run_values(run, part)
        independent = [name for name in values if name != "by_btu" and name not in BTU_INDEPENDENT_METRICS]
        rows.extend({**row, "rep": run.rep} for row in long_rows(
            run.manifest, values, run.run_dir, independent=[*BTU_INDEPENDENT_METRICS, *independent]))
    per_run = pd.DataFrame(rows)
    summary = mean_sd(per_run.drop(columns="rep"), rank=metric_rank, statistics=spark_mean_sd)
    per_run["btu_minutes"] = pd.array(per_run["btu_minutes"], dtype="Int64")
    per_run = per_run.assign(_btu=per_run["btu_minutes"].fillna(-1), _rank=per_run["metric"].map(metric_rank))
    per_run = per_run.sort_values(["pattern", "config", "rep", "_btu", "_rank"], kind="mergesort")
    return ReportMetrics(per_run[PER_RUN_COLUMNS].reset_index(drop=True), summary)
