"""Metrics of spec §12 per run, then mean and sd over repetitions per configuration, with Spark.

The definitions are those of reporting.summary (the plain-pandas computation the tests compare
against), extended by per-operator compliance and time to adapt, elasticity metrics
(reporting.elasticity) and the mean operator instances and leased VMs:

* compliance at level L = share of sampled durations <= factor_L x SLO, headline without the
  configured excluded operators (O2/O6), `_all` over every operator, and per operator;
* penalty at L = penalty_per_item x processed items x (1 - headline share at L);
* resource cost = paid BTUs x price per BTU; a lease billed under the BTU it was made with pays
  its stored paid_btus, under another BTU ⌈duration / BTU⌉ (at least 1). BTU-based runs are billed
  under their own BTU, BTU-agnostic runs under each of billing.rebill_minutes;
* total cost at L = resource cost + penalty at L; early release = released with more paid time
  unused than the policy's release window;
* time to adapt = mean length of the violation episodes (first real-time violation after a
  compliant sample until the next compliant sample), over all episodes of all operators.

Spark's missing values are nulls (never NaN), so averages and counts skip them like pandas skips NaN.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, Sequence, Tuple

import pandas as pd

from reporting.elasticity import DEMAND_SUPPLY_METRICS, ELASTICITY_METRICS, elasticity_metrics
from reporting.run_catalog import ReportError, RunCatalog
from reporting.spark_tables import RunTables, materialise
from reporting.summary import BTU_DEPENDENT_METRICS, BTU_INDEPENDENT_METRICS, COLUMNS, LEVELS, METRICS
from testbed.billing import BILLING_EPSILON_S  # paid_btus's tolerance, in the Spark expression
from testbed.eventlog import ACTIONS

_ACTION_COUNTS = {"vm_leases": "lease", "vm_prolongations": "prolong", "vm_releases": "release",
                  "scale_ups": "scale_up", "scale_downs": "scale_down", "migrations": "migrate"}
# math.isclose's default: the lease's own BTU and the billing BTU are "the same"
_ISCLOSE_REL = 1e-9

RUN_LEVEL_EXTRA_METRICS: Tuple[str, ...] = (*ELASTICITY_METRICS, *DEMAND_SUPPLY_METRICS, "mean_instances", "mean_leased_vms")
PER_RUN_COLUMNS = ["pattern", "approach", "config", "rep", "btu_minutes", "metric", "value"]


def compliance_metric(level: str, operator: str) -> str:
    return f"{level}_compliance_{operator}_pct"


def metric_rank(metric: str) -> Tuple[int, int, str]:
    """Report order: summary's metrics, the run-level extras, then per-operator metrics by kind."""
    known = [*METRICS, *RUN_LEVEL_EXTRA_METRICS]
    if metric in known:
        return (0, known.index(metric), "")
    kinds = [*(f"{level}_compliance_" for level, _ in LEVELS), "time_to_adapt_", *(m.rsplit("_", 1)[0] + "_" for m in ELASTICITY_METRICS)]
    for i, prefix in enumerate(kinds):
        if metric.startswith(prefix):
            return (1, i, metric)
    return (2, 0, metric)


@dataclass
class SparkMetrics:
    per_run: pd.DataFrame  # PER_RUN_COLUMNS: one value per run, BTU length (if any) and metric
    summary: pd.DataFrame  # reporting.summary.COLUMNS: mean, sd, n over repetitions
    timings: Dict[str, float] = field(default_factory=dict)  # seconds per step (benchmark figures)


class _Stopwatch:
    def __init__(self) -> None:
        self.timings: Dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + now - self._last
        self._last = now


# ---- run parameters as small Spark tables --------------------------------------------------------

def _run_frames(spark, catalog: RunCatalog):
    from pyspark.sql import types as T

    runs = spark.createDataFrame(
        [(r.run_id, r.pattern, r.approach, r.config, r.rep, r.own_btu, r.penalty_per_item()) for r in catalog.complete],
        T.StructType([
            T.StructField("run_id", T.IntegerType(), False), T.StructField("pattern", T.StringType(), False),
            T.StructField("approach", T.StringType(), False), T.StructField("config", T.StringType(), False),
            T.StructField("rep", T.IntegerType(), False), T.StructField("own_btu", T.IntegerType(), True),
            T.StructField("penalty_per_item", T.DoubleType(), False),
        ]))
    ops = spark.createDataFrame(
        [(r.run_id, o.operator, o.slo_ms, o.excluded, None if math.isnan(o.capacity_per_s) else o.capacity_per_s)
         for r in catalog.complete for o in r.operators()],
        T.StructType([
            T.StructField("run_id", T.IntegerType(), False), T.StructField("operator", T.StringType(), False),
            T.StructField("slo_ms", T.DoubleType(), False), T.StructField("excluded", T.BooleanType(), False),
            T.StructField("capacity_per_s", T.DoubleType(), True),
        ]))
    billing = spark.createDataFrame(
        [(r.run_id, b.btu_minutes, b.price_per_btu, b.release_window_s) for r in catalog.complete for b in r.billing()],
        T.StructType([
            T.StructField("run_id", T.IntegerType(), False), T.StructField("bill_minutes", T.IntegerType(), False),
            T.StructField("price_per_btu", T.DoubleType(), False), T.StructField("release_window_s", T.DoubleType(), False),
        ]))
    return runs, ops, billing


# ---- the metrics ---------------------------------------------------------------------------------

def _samples_metrics(tables: RunTables, ops, catalog: RunCatalog):
    """Compliance and time to adapt in one pass over the samples (the largest table): a window per
    (run, operator) in time order finds the violation episodes, and the aggregation that follows
    reuses the window's partitioning, so the samples are scanned and shuffled once.

    Returns (per-run shares and time to adapt, per-operator long rows). Fails on samples of
    operators without an SLO."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    s = tables["samples"].join(F.broadcast(ops.select("run_id", "operator", "slo_ms", "excluded")),
                               ["run_id", "operator"], "left")
    ok = {level: F.col("duration_ms") <= F.lit(factor) * F.col("slo_ms") for level, factor in LEVELS}
    # _row (position in the file) breaks ties in t_s as the pandas stable sort does
    w = Window.partitionBy("run_id", "operator").orderBy("t_s", "_row")
    s = s.select("run_id", "operator", "t_s", "_row", "slo_ms", "excluded",
                 *[cond.alias(f"ok_{level}") for level, cond in ok.items()])
    s = s.withColumn("prev_ok", F.lag("ok_realtime").over(w))
    # An episode starts at a real-time violation right after a compliant sample. The last start at
    # or before a compliant sample that follows a violation is the start of the episode it ends;
    # leading violations have no compliant sample before them, hence no start.
    s = s.withColumn("start_t", F.when(~F.col("ok_realtime") & F.col("prev_ok"), F.col("t_s")))
    s = s.withColumn("open_start", F.last("start_t", ignorenulls=True).over(
        w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    ends = F.col("ok_realtime") & ~F.col("prev_ok") & F.col("open_start").isNotNull()
    s = s.withColumn("episode_s", F.when(ends, F.col("t_s") - F.col("open_start")))
    per_op = materialise(s.groupBy("run_id", "operator").agg(
        F.count(F.lit(1)).alias("n"),
        *[F.sum(F.col(f"ok_{level}").cast("int")).alias(f"ok_{level}") for level, _ in LEVELS],
        F.first("excluded", ignorenulls=True).alias("excluded"),
        F.max(F.col("slo_ms").isNull().cast("int")).alias("no_slo"),
        F.sum("episode_s").alias("episode_sum"), F.count("episode_s").alias("episodes"),
    ))
    unknown = per_op.where(F.col("no_slo") == 1).select("run_id", "operator").orderBy("run_id", "operator").collect()
    if unknown:
        by_id = {r.run_id: r.run_dir for r in catalog.complete}
        first = unknown[0]["run_id"]
        ops_of_run = sorted(u["operator"] for u in unknown if u["run_id"] == first)
        raise ReportError(f"{by_id[first]}: samples of operators without an SLO in the config: {ops_of_run}")

    def share(ok_col, n_col):
        return F.try_divide(ok_col.cast("double"), n_col.cast("double"))

    headline = ~F.col("excluded")
    agg = [F.sum(F.when(headline, F.col("n"))).alias("n_head"), F.sum("n").alias("n_all"),
           F.sum("episode_sum").alias("episode_sum"), F.sum("episodes").alias("episodes")]
    for level, _ in LEVELS:
        agg.append(F.sum(F.when(headline, F.col(f"ok_{level}"))).alias(f"ok_head_{level}"))
        agg.append(F.sum(f"ok_{level}").alias(f"ok_all_{level}"))
    rolled = per_op.groupBy("run_id").agg(*agg)
    per_run = rolled.select(
        "run_id",
        *[share(F.col(f"ok_head_{level}"), F.col("n_head")).alias(f"share_{level}") for level, _ in LEVELS],
        *[share(F.col(f"ok_all_{level}"), F.col("n_all")).alias(f"share_all_{level}") for level, _ in LEVELS],
        # mean over all episodes of all operators; null without any episode
        F.try_divide(F.col("episode_sum"), F.col("episodes").cast("double")).alias("time_to_adapt_s"),
    )
    per_op_long = per_op.select(
        "run_id",
        F.explode(F.array(
            *[F.struct(F.concat(F.lit(f"{level}_compliance_"), F.col("operator"), F.lit("_pct")).alias("metric"),
                       (F.lit(100.0) * share(F.col(f"ok_{level}"), F.col("n"))).alias("value"))
              for level, _ in LEVELS],
            F.struct(F.concat(F.lit("time_to_adapt_"), F.col("operator"), F.lit("_s")).alias("metric"),
                     F.try_divide(F.col("episode_sum"), F.col("episodes").cast("double")).alias("value")),
        )).alias("m"),
    ).select("run_id", "m.metric", "m.value")
    return per_run, per_op_long


def _costs(tables: RunTables, billing, catalog: RunCatalog):
    """Per (run_id, bill_minutes): paid BTUs and early releases."""
    from pyspark.sql import functions as F

    leases = tables["leases"]
    bill_s = F.col("bill_minutes") * F.lit(60.0)
    same_btu = F.abs(F.col("btu_s") - bill_s) <= F.lit(_ISCLOSE_REL) * F.greatest(F.abs(F.col("btu_s")), F.abs(bill_s))
    rebilled = F.greatest(F.lit(1), F.ceil((F.col("end_s") - F.col("start_s") - F.lit(BILLING_EPSILON_S)) / bill_s))
    btus = F.when(same_btu, F.col("paid_btus")).otherwise(rebilled).cast("long")
    billed = leases.join(F.broadcast(billing), "run_id").withColumn("btus", btus)
    unused = F.col("start_s") + F.col("btus") * bill_s - F.col("end_s")
    early = (F.col("released") & (unused > F.col("release_window_s"))).cast("int")
    backwards = F.col("end_s") < F.col("start_s")
    per_bill = billed.groupBy("run_id", "bill_minutes").agg(
        F.sum("btus").alias("paid_btus_l"), F.sum(early).alias("early"),
        # a lease ending before it starts cannot be billed: found here, reported below
        F.first(F.when(backwards, F.concat_ws(" ", F.col("host"), F.col("start_s"), F.col("end_s"))),
                ignorenulls=True).alias("backwards"))
    costs = materialise(billing.join(per_bill, ["run_id", "bill_minutes"], "left").select(
        "run_id", "bill_minutes", "price_per_btu",
        F.coalesce(F.col("paid_btus_l"), F.lit(0)).alias("paid_btus_l"),
        F.coalesce(F.col("early"), F.lit(0)).alias("early"), "backwards",
    ))
    bad = costs.where(F.col("backwards").isNotNull()).orderBy("run_id").limit(1).collect()
    if bad:
        run_dir = {r.run_id: r.run_dir for r in catalog.complete}[bad[0]["run_id"]]
        host, start, end = bad[0]["backwards"].rsplit(" ", 2)
        raise ReportError(f"{run_dir}: lease of host {host!r}: lease ends before it starts: {start} > {end}")
    return costs


def _mean_resources(tables: RunTables):
    from pyspark.sql import functions as F

    per_t = tables["instances"].groupBy("run_id", "t_s").agg(F.sum("instances").alias("n"))
    inst = per_t.groupBy("run_id").agg(F.avg("n").cast("double").alias("mean_instances"))
    vms = tables["hosts"].groupBy("run_id").agg(F.avg("leased").cast("double").alias("mean_leased_vms"))
    return inst.join(vms, "run_id", "full")


def compute_metrics(spark, catalog: RunCatalog, tables: RunTables | None = None) -> SparkMetrics:
    """All metrics of the catalog's complete runs: per run, then mean/sd/n per configuration."""
    from pyspark.sql import functions as F

    watch = _Stopwatch()
    tables = tables or RunTables(spark, catalog)
    runs, ops, billing = _run_frames(spark, catalog)
    watch.lap("run parameters")
    shares, samples_per_op = _samples_metrics(tables, ops, catalog)
    watch.lap("compliance and time to adapt")
    # used once, in the per-run table below: computed when that is materialised
    items = tables["processed"].groupBy("run_id").agg(F.sum("items").alias("items"))
    actions = tables["actions"].groupBy("run_id").pivot("action", list(ACTIONS)).count()
    resources = _mean_resources(tables)
    elasticity_run, elasticity_per_op = elasticity_metrics(tables, ops)
    watch.lap("elasticity")

    wide = (runs.join(shares, "run_id", "left").join(items, "run_id", "left").join(actions, "run_id", "left")
            .join(resources, "run_id", "left")
            .withColumn("items", F.coalesce(F.col("items"), F.lit(0))))
    wide = materialise(wide)
    watch.lap("items, actions, resources (per-run table)")

    # BTU-independent metrics, as doubles, in summary's definitions (same operation order, so the
    # floating-point results are the same as pandas')
    penalty = {level: F.col("penalty_per_item") * F.col("items") * (F.lit(1.0) - F.col(f"share_{level}"))
               for level, _ in LEVELS}
    independent: Dict[str, object] = {}
    for level, _ in LEVELS:
        independent[f"{level}_compliance_pct"] = F.lit(100.0) * F.col(f"share_{level}")
    for level, _ in LEVELS:
        independent[f"{level}_compliance_all_pct"] = F.lit(100.0) * F.col(f"share_all_{level}")
    independent["processed_items"] = F.col("items").cast("double")
    for level, _ in LEVELS:
        independent[f"{level}_penalty"] = penalty[level]
    for name, action in _ACTION_COUNTS.items():
        independent[name] = F.coalesce(F.col(action), F.lit(0)).cast("double")
    independent["time_to_adapt_s"] = F.col("time_to_adapt_s")
    independent["mean_instances"] = F.col("mean_instances")
    independent["mean_leased_vms"] = F.col("mean_leased_vms")
    missing = set(BTU_INDEPENDENT_METRICS) - set(independent)
    assert not missing, f"metrics of reporting.summary not computed here: {sorted(missing)}"

    run_level = wide.select("run_id", *[v.cast("double").alias(k) for k, v in independent.items()])
    independent_long = (
        run_level.unpivot(["run_id"], list(independent), "metric", "value")
        .unionByName(elasticity_run.select("run_id", "metric", F.col("value").cast("double")))
        .unionByName(samples_per_op)
        .unionByName(elasticity_per_op.select("run_id", "metric", "value"))
    )

    costs = _costs(tables, billing, catalog)
    watch.lap("costs")
    costs = costs.join(wide.select("run_id", *[penalty[level].alias(f"pen_{level}") for level, _ in LEVELS]), "run_id")
    resource = F.col("paid_btus_l") * F.col("price_per_btu")
    dependent = {"paid_btus": F.col("paid_btus_l").cast("double"), "resource_cost": resource}
    for level, _ in LEVELS:
        dependent[f"{level}_total_cost"] = resource + F.col(f"pen_{level}")
    dependent["vm_early_releases"] = F.col("early").cast("double")
    assert list(dependent) == list(BTU_DEPENDENT_METRICS)
    dependent_long = costs.select("run_id", F.col("bill_minutes").alias("btu_minutes"),
                                  *[v.cast("double").alias(k) for k, v in dependent.items()]) \
        .unpivot(["run_id", "btu_minutes"], list(dependent), "metric", "value")

    # a BTU run's metrics all belong to its BTU; a BTU-agnostic run's BTU-independent metrics hold
    # for every BTU length (btu_minutes empty, as in the paper's tables)
    per_run = (
        independent_long.join(F.broadcast(runs), "run_id")
        .select("pattern", "approach", "config", "rep", F.col("own_btu").alias("btu_minutes"), "metric", "value")
        .unionByName(dependent_long.join(F.broadcast(runs), "run_id")
                     .select("pattern", "approach", "config", "rep", "btu_minutes", "metric", "value"))
    )
    per_run = materialise(per_run)
    watch.lap("long table")
    keys = ["pattern", "approach", "config", "btu_minutes", "metric"]
    summary = per_run.groupBy(*keys).agg(
        F.avg("value").alias("mean"), F.stddev_samp("value").alias("sd"), F.count("value").alias("n"))

    per_run_pd = _ordered(per_run.toPandas(), ["pattern", "config", "rep"])[PER_RUN_COLUMNS]
    watch.lap("per-run values to pandas")
    summary_pd = _ordered(summary.toPandas(), ["pattern", "config"])[COLUMNS]
    watch.lap("mean/sd over repetitions")
    return SparkMetrics(per_run_pd.reset_index(drop=True), summary_pd.reset_index(drop=True), watch.timings)


def _ordered(df: pd.DataFrame, leading: Sequence[str]) -> pd.DataFrame:
    """Deterministic order (summary's: pattern, config, BTU with empty first, metric rank)."""
    df = df.copy()
    df["btu_minutes"] = pd.array(df["btu_minutes"], dtype="Int64")
    for column in ("mean", "sd", "value"):
        if column in df.columns:
            df[column] = pd.to_numeric(df[column], errors="coerce").astype(float)
    if "n" in df.columns:
        df["n"] = df["n"].astype(int)
    order = df.assign(_btu=df["btu_minutes"].fillna(-1), _rank=df["metric"].map(metric_rank))
    order = order.sort_values([*leading, "_btu", "_rank"], kind="mergesort")
    return order.drop(columns=["_btu", "_rank"])
