"""The data behind the figures (one row per plotted point), from the Spark stage's aggregates, so
plotting never touches the event logs' millions of rows."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from reporting.run_catalog import RunCatalog
from reporting.spark_passes import BIN_S, LOG_BIN, Aggregates


@dataclass
class FigureData:
    arrivals: pd.DataFrame  # pattern, minute, machines
    timeseries: pd.DataFrame  # pattern, config, rep, minute, series, value
    durations: pd.DataFrame  # pattern, config, operator, ratio (bin's upper edge of duration/SLO), count


def figure_data(catalog: RunCatalog, aggregates: Aggregates) -> FigureData:
    runs = pd.DataFrame([(r.run_id, r.pattern, r.config, r.rep) for r in catalog.complete],
                        columns=["run_id", "pattern", "config", "rep"])
    load = aggregates.load.merge(runs, on="run_id")
    # machines per minute; every run of a pattern replays the same pattern, max over runs is exact
    arrivals = load.groupby(["pattern", "minute"], as_index=False)["machines"].max()
    cols = ["pattern", "config", "rep", "minute", "series", "value"]
    # data volume = items entering the topology per second
    volume = load.assign(value=load["items"] / BIN_S, series="data volume [items/s]")[cols]
    instances = aggregates.instances.merge(runs, on="run_id")
    instances = instances.assign(value=instances["instances"] / instances["intervals"],
                                 series="operator instances")[cols]
    hosts = aggregates.hosts.merge(runs, on="run_id")
    hosts = hosts.assign(value=hosts["leased"] / hosts["intervals"], series="leased VMs")[cols]
    timeseries = pd.concat([volume, instances, hosts], ignore_index=True)
    timeseries = timeseries.sort_values(["pattern", "config", "rep", "series", "minute"], kind="mergesort")

    samples = aggregates.compliance.merge(runs, on="run_id")
    durations = samples.groupby(["pattern", "config", "operator", "bin"], as_index=False)["n"].sum()
    durations = durations.rename(columns={"n": "count"})
    durations["ratio"] = 10.0 ** (durations.pop("bin").astype(float) * LOG_BIN)
    durations = durations.sort_values(["pattern", "config", "operator", "ratio"], kind="mergesort")
    return FigureData(arrivals.sort_values(["pattern", "minute"], kind="mergesort").reset_index(drop=True),
                      timeseries.reset_index(drop=True), durations.reset_index(drop=True))
