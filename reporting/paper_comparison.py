"""Measured results beside the published ones: paper_comparison.csv, for any evaluation whose YAML
names a reference table (experiments/reference/*.csv, the long format).

A reference table and results.csv share their keys (pattern, approach, btu_minutes, metric), so
they join directly; a value of a re-billed configuration that no BTU length changes (compliance)
has an empty btu_minutes in both. Measured approaches the paper does not have are left out.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from reporting.metrics import configurations, rebilled

KEYS = ["pattern", "approach", "btu_minutes", "metric"]
REFERENCE_COLUMNS = ["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "note"]


def load_reference(path: Path) -> pd.DataFrame:
    """The published table: pattern, approach, btu_minutes (Int64, empty = every BTU), metric, mean, sd, note."""
    ref = pd.read_csv(path, dtype={"pattern": str, "approach": str, "metric": str, "note": str})
    ref["btu_minutes"] = pd.array(pd.to_numeric(ref["btu_minutes"], errors="coerce"), dtype="Int64")
    for column in ("mean", "sd"):
        ref[column] = pd.to_numeric(ref[column], errors="coerce").astype(float)
    ref["note"] = ref["note"].fillna("")
    return ref


def config_labels(table: pd.DataFrame) -> pd.Series:
    """Per row of a long-format table: threshold@10 for a re-billed configuration under a BTU
    length, btu-10 for one billed by its own BTU, threshold for BTU-free values."""
    config = configurations(table)
    rebilled_configs = {c for c, rows in table.groupby(config) if rebilled(rows)}
    btu = pd.to_numeric(table["btu_minutes"], errors="coerce")
    return pd.Series([f"{c}@{int(b)}" if c in rebilled_configs and not pd.isna(b) else c
                      for c, b in zip(config, btu, strict=True)],
                     index=table.index)


def compare(measured: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One row per published value of a measured pattern: paper and measured mean/sd, difference."""
    patterns = sorted(set(measured["pattern"]))
    ref = reference[reference["pattern"].isin(patterns)]
    own_config = "config" in measured
    mine = measured[KEYS + ["mean", "sd", "n"] + (["config"] if own_config else [])].copy()
    mine["btu_minutes"] = pd.array(mine["btu_minutes"], dtype="Int64")
    joined = ref.merge(mine, on=KEYS, how="left", suffixes=("_paper", "_measured"))
    joined["difference"] = joined["mean_measured"] - joined["mean_paper"]
    labels = config_labels(joined.drop(columns="config") if own_config else joined)
    if own_config:  # several configurations of one approach (dabs, dabs-util) each keep their own name
        shared = joined.duplicated(KEYS, keep=False) & joined["config"].notna()
        labels = labels.where(~shared, joined["config"])
        joined = joined.drop(columns="config")
    joined.insert(2, "config", labels)
    order = {name: i for i, name in enumerate(dict.fromkeys(reference["metric"]))}
    # per metric: re-billed configurations (the baseline) first, then those billed by their own BTU
    own = {a for a, rows in joined.groupby("approach") if not rebilled(rows)}
    joined = joined.assign(_m=joined["metric"].map(order), _a=joined["approach"].isin(own),
                           _b=joined["btu_minutes"].fillna(-1))
    joined = joined.sort_values(["pattern", "_m", "_a", "_b"], kind="mergesort").drop(columns=["_m", "_a", "_b"])
    columns = ["pattern", "approach", "config", "btu_minutes", "metric", "mean_paper", "sd_paper",
               "mean_measured", "sd_measured", "n", "difference", "note"]
    return joined[columns].reset_index(drop=True)
