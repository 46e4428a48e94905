"""The data behind the figures, aggregated with Spark to small pandas tables (one row per plotted
point), so plotting never touches the event logs' millions of rows."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from reporting.run_catalog import RunCatalog
from reporting.spark_tables import RunTables, materialise

# time resolution of the time-series figures: one point per minute of a 120-min run
BIN_S = 60.0
# duration distributions: histogram of log10(duration / SLO) in steps of 1/20 decade, 10^-3..10^2
LOG_BIN = 0.05
LOG_MIN, LOG_MAX = -3.0, 2.0


@dataclass
class FigureData:
    arrivals: pd.DataFrame  # pattern, minute, machines
    timeseries: pd.DataFrame  # pattern, config, rep, minute, series, value
    durations: pd.DataFrame  # pattern, config, operator, ratio (bin's upper edge of duration/SLO), count


def _runs(spark, catalog: RunCatalog):
    return spark.createDataFrame([(r.run_id, r.pattern, r.config, r.rep) for r in catalog.complete],
                                 "run_id int, pattern string, config string, rep int")


def figure_data(spark, catalog: RunCatalog, tables: RunTables) -> FigureData:
    from pyspark.sql import functions as F

    runs = F.broadcast(_runs(spark, catalog))
    minute = (F.floor(F.col("t_s") / F.lit(BIN_S)) * F.lit(BIN_S / 60.0)).alias("minute")

    # one pass over the load table serves both the arrival patterns and the data volume
    load = materialise(tables["load"].join(runs, "run_id").groupBy("pattern", "config", "rep", minute)
                       .agg(F.max("machines").alias("machines"), F.sum("items").alias("items")))
    # machines per minute; every run of a pattern replays the same pattern, max over runs is exact
    arrivals = load.groupBy("pattern", "minute").agg(F.max("machines").alias("machines"))
    # data volume = items entering the topology per second
    volume = load.select("pattern", "config", "rep", "minute", (F.col("items") / F.lit(BIN_S)).alias("value"),
                         F.lit("data volume [items/s]").alias("series"))
    per_t = tables["instances"].groupBy("run_id", "t_s").agg(F.sum("instances").alias("n"))
    instances = (per_t.join(runs, "run_id").groupBy("pattern", "config", "rep", minute)
                 .agg(F.avg("n").alias("value")).withColumn("series", F.lit("operator instances")))
    vms = (tables["hosts"].join(runs, "run_id").groupBy("pattern", "config", "rep", minute)
           .agg(F.avg("leased").alias("value")).withColumn("series", F.lit("leased VMs")))
    cols = ["pattern", "config", "rep", "minute", "series", "value"]
    timeseries = volume.select(*cols).unionByName(instances.select(*cols)).unionByName(vms.select(*cols))

    ops = spark.createDataFrame([(r.run_id, o.operator, o.slo_ms) for r in catalog.complete for o in r.operators()],
                                "run_id int, operator string, slo_ms double")
    ratio = F.greatest(F.col("duration_ms") / F.col("slo_ms"), F.lit(10 ** LOG_MIN))
    log_bin = F.least(F.ceil(F.log10(ratio) / F.lit(LOG_BIN)), F.lit(int(round(LOG_MAX / LOG_BIN))))
    durations = (tables["samples"].join(F.broadcast(ops), ["run_id", "operator"]).join(runs, "run_id")
                 .groupBy("pattern", "config", "operator", log_bin.alias("bin")).agg(F.count(F.lit(1)).alias("count")))

    arrivals_pd = arrivals.toPandas().sort_values(["pattern", "minute"], kind="mergesort").reset_index(drop=True)
    ts_pd = timeseries.toPandas().sort_values(["pattern", "config", "rep", "series", "minute"], kind="mergesort")
    dur_pd = durations.toPandas()
    dur_pd["ratio"] = 10.0 ** (dur_pd.pop("bin").astype(float) * LOG_BIN)
    dur_pd = dur_pd.sort_values(["pattern", "config", "operator", "ratio"], kind="mergesort").reset_index(drop=True)
    return FigureData(arrivals_pd, ts_pd.reset_index(drop=True), dur_pd)
