"""Elasticity metrics after the SPEC Research Group (Herbst et al., "Quantifying Cloud Performance
and Dependability", ACM TOMPECS 2018), per operator type and run, with Spark.

Per monitoring interval i of length dt_i (from the previous sample, the first from t = 0):
* supply s_i = running instances of the operator at the end of the interval (`instances` table);
* demand d_i = instances needed for the measured input rate at the configured service capacity:
  max(1, ceil(rate_i / capacity)), rate_i = items that arrived in the interval / dt_i, arrived =
  processed + queue growth (processed alone could never exceed the supply), and capacity =
  service.parallel / service.mean_ms per instance (the simulator's service model);
* with T = sum of dt_i:
  under-provisioning accuracy  = 100/T * sum(max(d - s, 0) / d * dt)
  over-provisioning accuracy   = 100/T * sum(max(s - d, 0) / d * dt)
  under-provisioning timeshare = 100/T * sum([d > s] * dt)
  over-provisioning timeshare  = 100/T * sum([s > d] * dt)
  instability                  = 100/(T - dt_1) * sum over i >= 2 of
                                 min(|sgn(s_i - s_{i-1}) - sgn(d_i - d_{i-1})|, 1) * dt_i
  (the share of time supply and demand do not move in the same direction).
A run's value is the mean over its operators (each operator is a resource pool of its own; summing
instances across operators would let one operator's surplus hide another's shortage). Beside them,
mean_demand_instances / mean_supply_instances: time-weighted means summed over the operators.
"""
from __future__ import annotations

from typing import List, Tuple

from reporting.spark_tables import materialise

ELASTICITY_METRICS: Tuple[str, ...] = (
    "elasticity_under_accuracy_pct",
    "elasticity_over_accuracy_pct",
    "elasticity_under_timeshare_pct",
    "elasticity_over_timeshare_pct",
    "elasticity_instability_pct",
)
# demand and supply as instances (time-weighted means), beside the SPEC metrics
DEMAND_SUPPLY_METRICS: Tuple[str, ...] = ("mean_demand_instances", "mean_supply_instances")

# rate / capacity just above an integer must not ask for another instance because of float noise
_CEIL_EPSILON = 1e-9


def demand_supply(tables, ops):
    """Per (run_id, operator, t_s): dt, demand, supply (Spark DataFrame)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["run_id", "operator", "t_s"]
    series = (
        tables["processed"].select(*keys, "items")
        .join(tables["queues"].select(*keys, "depth"), keys)
        .join(tables["instances"].select(*keys, F.col("instances").alias("supply")), keys)
        .join(F.broadcast(ops.select("run_id", "operator", "capacity_per_s")), ["run_id", "operator"])
        .where(F.col("capacity_per_s").isNotNull())
    )
    w = Window.partitionBy("run_id", "operator").orderBy("t_s")
    dt = F.col("t_s") - F.coalesce(F.lag("t_s").over(w), F.lit(0.0))
    arrived = F.greatest(F.col("items") + F.col("depth") - F.coalesce(F.lag("depth").over(w), F.lit(0)), F.lit(0))
    rate = F.try_divide(arrived.cast("double"), dt)
    demand = F.greatest(F.lit(1), F.ceil(F.try_divide(rate, F.col("capacity_per_s")) - F.lit(_CEIL_EPSILON)))
    return series.select("run_id", "operator", "t_s", dt.alias("dt"), demand.cast("long").alias("demand"),
                         F.col("supply").cast("long").alias("supply")).where(F.col("dt") > 0)


def elasticity_metrics(tables, ops):
    """(per_run, per_operator) long DataFrames of (run_id, metric, value) and
    (run_id, operator, metric, value)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ds = demand_supply(tables, ops)
    w = Window.partitionBy("run_id", "operator").orderBy("t_s")
    d, s, dt = F.col("demand"), F.col("supply"), F.col("dt")
    first = F.row_number().over(w) == 1
    moves_apart = F.least(F.abs(F.signum(s - F.lag(s).over(w)) - F.signum(d - F.lag(d).over(w))), F.lit(1.0))
    terms = ds.select(
        "run_id", "operator", dt.alias("dt"),
        (F.greatest(d - s, F.lit(0)) / d * dt).alias("under_acc"),
        (F.greatest(s - d, F.lit(0)) / d * dt).alias("over_acc"),
        F.when(d > s, dt).otherwise(0.0).alias("under_time"),
        F.when(s > d, dt).otherwise(0.0).alias("over_time"),
        F.when(first, None).otherwise(moves_apart * dt).alias("unstable"),
        F.when(first, None).otherwise(dt).alias("dt_after_first"),
        (d * dt).alias("d_dt"), (s * dt).alias("s_dt"),
    )
    sums = materialise(terms.groupBy("run_id", "operator").agg(
        F.sum("dt").alias("T"), F.sum("under_acc").alias("ua"), F.sum("over_acc").alias("oa"),
        F.sum("under_time").alias("ut"), F.sum("over_time").alias("ot"),
        F.sum("unstable").alias("un"), F.sum("dt_after_first").alias("T2"),
        F.sum("d_dt").alias("dd"), F.sum("s_dt").alias("ss"),
    ))

    def pct(num: str, den: str):
        return F.lit(100.0) * F.try_divide(F.col(num), F.col(den))

    values = {
        "elasticity_under_accuracy_pct": pct("ua", "T"),
        "elasticity_over_accuracy_pct": pct("oa", "T"),
        "elasticity_under_timeshare_pct": pct("ut", "T"),
        "elasticity_over_timeshare_pct": pct("ot", "T"),
        "elasticity_instability_pct": pct("un", "T2"),
        "mean_demand_instances": F.try_divide(F.col("dd"), F.col("T")),
        "mean_supply_instances": F.try_divide(F.col("ss"), F.col("T")),
    }
    names: List[str] = list(values)
    wide = sums.select("run_id", "operator", *[v.alias(k) for k, v in values.items()])
    per_op = wide.unpivot(["run_id", "operator"], names, "metric", "value")
    # the SPEC metrics average over operators; demand and supply add up to the topology's instances
    total = F.col("metric").isin(list(DEMAND_SUPPLY_METRICS))
    per_run = per_op.groupBy("run_id", "metric").agg(
        F.when(total, F.sum("value")).otherwise(F.avg("value")).alias("value"))
    per_op_named = per_op.where(F.col("metric").isin(list(ELASTICITY_METRICS))).select(
        "run_id", "operator",
        F.concat(F.regexp_extract("metric", r"^(.*)_[^_]+$", 1), F.lit("_"), F.col("operator"),
                 F.lit("_"), F.regexp_extract("metric", r"_([^_]+)$", 1)).alias("metric"),
        "value",
    )
    return per_run, per_op_named
