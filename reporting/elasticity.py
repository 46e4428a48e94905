"""Elasticity metrics after the SPEC Research Group (Herbst et al., "Quantifying Cloud Performance
and Dependability", ACM TOMPECS 2018), per operator type and run: sums over the monitoring
intervals with Spark (`elasticity_sums`), the metrics from those sums with pandas
(`elasticity_metrics`).

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

from typing import Dict, Tuple

import pandas as pd

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

# the sums per (run, operator) that elasticity_sums computes: T, under/over accuracy, under/over
# time, unstable time, T after the first interval, demand x dt, supply x dt
SUMS = ("T", "ua", "oa", "ut", "ot", "un", "T2", "dd", "ss")


def _demand_supply(tables, capacity):
    """Per (run_id, operator, t_s): dt, demand, supply. One shuffle: the three monitoring tables are
    stacked and partitioned by (run, operator), which both the grouping by interval and the window
    over time then reuse; an interval counts when all three tables have it (an inner join's rows)
    and the operator has a capacity (a column: capacity per second of the row's run and operator)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["run_id", "operator", "t_s"]
    stacked = (tables["processed"].select(*keys, "items")
               .unionByName(tables["queues"].select(*keys, "depth"), allowMissingColumns=True)
               .unionByName(tables["instances"].select(*keys, F.col("instances").alias("supply")),
                            allowMissingColumns=True))
    series = (
        stacked.repartition("run_id", "operator").groupBy(*keys)
        .agg(F.max("items").alias("items"), F.max("depth").alias("depth"), F.max("supply").alias("supply"))
        .withColumn("capacity_per_s", capacity)
        .where(F.col("items").isNotNull() & F.col("depth").isNotNull() & F.col("supply").isNotNull()
               & F.col("capacity_per_s").isNotNull())
    )
    w = Window.partitionBy("run_id", "operator").orderBy("t_s")
    dt = F.col("t_s") - F.coalesce(F.lag("t_s").over(w), F.lit(0.0))
    arrived = F.greatest(F.col("items") + F.col("depth") - F.coalesce(F.lag("depth").over(w), F.lit(0)), F.lit(0))
    rate = F.try_divide(arrived.cast("double"), dt)
    demand = F.greatest(F.lit(1), F.ceil(F.try_divide(rate, F.col("capacity_per_s")) - F.lit(_CEIL_EPSILON)))
    return series.select("run_id", "operator", "t_s", dt.alias("dt"), demand.cast("long").alias("demand"),
                         F.col("supply").cast("long").alias("supply")).where(F.col("dt") > 0)


def elasticity_sums(tables, capacity):
    """Spark DataFrame of the SUMS per (run_id, operator); capacity: a column, the capacity per
    second of the row's run and operator (null without a service model)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ds = _demand_supply(tables, capacity)
    w = Window.partitionBy("run_id", "operator").orderBy("t_s")
    d, s, dt = F.col("demand"), F.col("supply"), F.col("dt")
    first = F.row_number().over(w) == 1
    moves_apart = F.least(F.abs(F.signum(s - F.lag(s).over(w)) - F.signum(d - F.lag(d).over(w))), F.lit(1.0))
    terms = ds.select(
        "run_id", "operator", dt.alias("T"),
        (F.greatest(d - s, F.lit(0)) / d * dt).alias("ua"),
        (F.greatest(s - d, F.lit(0)) / d * dt).alias("oa"),
        F.when(d > s, dt).otherwise(0.0).alias("ut"),
        F.when(s > d, dt).otherwise(0.0).alias("ot"),
        F.when(first, None).otherwise(moves_apart * dt).alias("un"),
        F.when(first, None).otherwise(dt).alias("T2"),
        (d * dt).alias("dd"), (s * dt).alias("ss"),
    )
    return terms.groupBy("run_id", "operator").agg(*[F.sum(name).alias(name) for name in SUMS])


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den, NaN where either is missing or den is 0 (Spark's try_divide)."""
    return num.astype(float) / den.astype(float).where(den != 0)


def elasticity_metrics(sums: pd.DataFrame) -> Tuple[Dict[str, float], Dict[str, float]]:
    """From one run's SUMS per operator (rows): (per-run metrics, per-operator metrics named
    elasticity_<kind>_<operator>_pct). Empty without operators."""
    if sums.empty:
        return {}, {}
    values = {
        "elasticity_under_accuracy_pct": 100.0 * _ratio(sums["ua"], sums["T"]),
        "elasticity_over_accuracy_pct": 100.0 * _ratio(sums["oa"], sums["T"]),
        "elasticity_under_timeshare_pct": 100.0 * _ratio(sums["ut"], sums["T"]),
        "elasticity_over_timeshare_pct": 100.0 * _ratio(sums["ot"], sums["T"]),
        "elasticity_instability_pct": 100.0 * _ratio(sums["un"], sums["T2"]),
        "mean_demand_instances": _ratio(sums["dd"], sums["T"]),
        "mean_supply_instances": _ratio(sums["ss"], sums["T"]),
    }
    # the SPEC metrics average over operators; demand and supply add up to the topology's instances
    per_run = {name: float(v.sum(min_count=1) if name in DEMAND_SUPPLY_METRICS else v.mean())
               for name, v in values.items()}
    per_operator = {}
    for name in ELASTICITY_METRICS:
        kind, unit = name.rsplit("_", 1)
        for operator, value in zip(sums["operator"], values[name], strict=True):
            per_operator[f"{kind}_{operator}_{unit}"] = float(value)
    return per_run, per_operator
