"""The Spark stage of a report: a few passes over the event-log tables of all runs at once, each a
grouped aggregation down to a small result per run (and operator, bin or minute), all of them
collected together in one Spark action (`collect_aggregates`). Everything after it (metrics,
figures) works on these small tables in pandas.

* samples, the largest table: samples and compliant samples per (run, operator, bin of duration /
  SLO) in a hash aggregation; the violation episodes (time to adapt) per (run, operator) from the
  samples shuffled once by (run, operator) and sorted by time there;
* processed, queues and instances stacked, shuffled once: the elasticity sums per (run, operator)
  (reporting.elasticity);
* per run: processed items, action counts and the lease rows (a few per run);
* per (run, minute): load (most active machines, items), operator instances and leased VMs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Dict, List, Tuple

import pandas as pd

from reporting.elasticity import elasticity_sums
from reporting.metrics import LEVELS
from reporting.run_catalog import RunCatalog
from reporting.spark_tables import RunTables

# time resolution of the time-series figures: one point per minute of a 120-min run
BIN_S = 60.0
# duration distributions: histogram of log10(duration / SLO) in steps of 1/20 decade, 10^-3..10^2
LOG_BIN = 0.05
LOG_MIN, LOG_MAX = -3.0, 2.0

LEASE_COLUMNS = ["host", "start_s", "end_s", "btu_s", "paid_btus", "prolongations", "released"]


@dataclass
class Aggregates:
    """The collected results, one small pandas table each (run_id = RunInfo.run_id)."""
    compliance: pd.DataFrame  # run_id, operator, bin, n, ok_<level>
    episodes: pd.DataFrame  # run_id, operator, episode_sum, episodes (operators with a transition to compliance)
    elasticity: pd.DataFrame  # run_id, operator, reporting.elasticity.SUMS
    items: pd.DataFrame  # run_id, items
    actions: pd.DataFrame  # run_id, action, n
    leases: pd.DataFrame  # run_id, LEASE_COLUMNS
    load: pd.DataFrame  # run_id, minute, machines, items
    instances: pd.DataFrame  # run_id, minute, instances (sum over the minute's intervals), intervals
    hosts: pd.DataFrame  # run_id, minute, leased (sum over the minute's intervals), intervals


def _per_run_and_operator(values: Dict[int, Dict[str, float]]):
    """A column: the value of the row's (run_id, operator), null where there is none. A literal
    map operator -> value per distinct set of values, chosen by run_id (one map in practice: the
    runs of an evaluation share their topology), so that no join and no broadcast is needed."""
    from pyspark.sql import functions as F

    groups: Dict[Tuple[Tuple[str, float], ...], List[int]] = {}
    for run_id, by_operator in values.items():
        groups.setdefault(tuple(sorted(by_operator.items())), []).append(run_id)
    column = F.lit(None).cast("double")
    for items, run_ids in groups.items():
        lookup = F.create_map(*[F.lit(v) for item in items for v in item])[F.col("operator")] if items else column
        column = lookup if len(groups) == 1 else F.when(F.col("run_id").isin(run_ids), lookup).otherwise(column)
    return column


def _compliance_pass(tables: RunTables, slo_ms):
    """Per (run, operator, bin of duration / SLO): samples n and those complying at each level,
    ok_<level>. Order does not matter: a hash aggregation, mostly before the shuffle."""
    from pyspark.sql import functions as F

    s = tables["samples"].select("run_id", "operator", "duration_ms", slo_ms.alias("slo_ms"))
    ratio = F.greatest(F.col("duration_ms") / F.col("slo_ms"), F.lit(10 ** LOG_MIN))
    log_bin = F.least(F.ceil(F.log10(ratio) / F.lit(LOG_BIN)), F.lit(int(round(LOG_MAX / LOG_BIN))))
    return s.groupBy("run_id", "operator", log_bin.alias("bin")).agg(
        F.count(F.lit(1)).alias("n"),
        *[F.sum((F.col("duration_ms") <= F.lit(factor) * F.col("slo_ms")).cast("long")).alias(f"ok_{level}")
          for level, factor in LEVELS])


def _episodes_pass(tables: RunTables, slo_ms):
    """Per (run, operator) with episodes: the sum and number of the violation episodes. An episode
    starts at a real-time violation right after a compliant sample and ends at the next compliant
    sample; leading violations and an episode still open at the end have no known length.

    The samples are shuffled by (run, operator) and sorted by time there, once; only the
    transitions between compliance and violation are kept, and as they alternate, the one before
    an episode's end is its start."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # _row (position in the file) breaks ties in t_s as the pandas stable sort does
    w = Window.partitionBy("run_id", "operator").orderBy("t_s", "_row")
    ok = (F.col("duration_ms") <= slo_ms).alias("ok")
    s = tables["samples"].select("run_id", "operator", "t_s", "_row", ok)
    s = s.select("*", F.lag("ok").over(w).alias("prev_ok"))
    transitions = s.where(F.col("ok") != F.col("prev_ok"))  # a start (ok -> violation) or an end
    ends = transitions.select("run_id", "operator", "ok", (F.col("t_s") - F.lag("t_s").over(w)).alias("length"))
    return ends.where(F.col("ok")).groupBy("run_id", "operator").agg(
        F.sum("length").alias("episode_sum"), F.count("length").alias("episodes"))


def _minute():
    from pyspark.sql import functions as F

    return (F.floor(F.col("t_s") / F.lit(BIN_S)) * F.lit(BIN_S / 60.0)).alias("minute")


def _passes(catalog: RunCatalog, tables: RunTables) -> dict:
    """The Spark DataFrame of each field of Aggregates."""
    from pyspark.sql import functions as F

    operators = {r.run_id: r.operators() for r in catalog.complete}
    slo_ms = _per_run_and_operator({run_id: {o.operator: o.slo_ms for o in ops}
                                    for run_id, ops in operators.items()})
    capacity = _per_run_and_operator({run_id: {o.operator: o.capacity_per_s for o in ops
                                               if not math.isnan(o.capacity_per_s)}  # NaN: no service model
                                      for run_id, ops in operators.items()})
    instances = tables["instances"].groupBy("run_id", "t_s").agg(F.sum("instances").alias("instances"))
    return {
        "compliance": _compliance_pass(tables, slo_ms),
        "episodes": _episodes_pass(tables, slo_ms),
        "elasticity": elasticity_sums(tables, capacity),
        "items": tables["processed"].groupBy("run_id").agg(F.sum("items").alias("items")),
        "actions": tables["actions"].groupBy("run_id", "action").agg(F.count(F.lit(1)).alias("n")),
        "leases": tables["leases"].select("run_id", *LEASE_COLUMNS),
        "load": tables["load"].groupBy("run_id", _minute()).agg(
            F.max("machines").alias("machines"), F.sum("items").alias("items")),
        "instances": instances.groupBy("run_id", _minute()).agg(
            F.sum("instances").alias("instances"), F.count(F.lit(1)).alias("intervals")),
        "hosts": tables["hosts"].groupBy("run_id", _minute()).agg(
            F.sum("leased").alias("leased"), F.count(F.lit(1)).alias("intervals")),
    }


def collect_aggregates(catalog: RunCatalog, tables: RunTables) -> Aggregates:
    """Run every pass in one Spark action: the results, tagged by part, are stacked into one
    DataFrame (each part's own columns, null elsewhere) and collected through Arrow."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    parts = _passes(catalog, tables)
    stacked = None
    for name, df in parts.items():
        df = df.select(F.lit(name).alias("part"), *df.columns)
        stacked = df if stacked is None else stacked.unionByName(df, allowMissingColumns=True)
    assert stacked is not None, "no report passes"  # _passes always has some
    table = stacked.toArrow()
    frames = {name: table.filter(pc.equal(table["part"], name)).select(df.columns).to_pandas()
              for name, df in parts.items()}
    assert set(frames) == {f.name for f in fields(Aggregates)}
    return Aggregates(**frames)
