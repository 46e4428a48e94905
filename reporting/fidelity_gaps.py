"""How far a measured summary lands from the published table, cell by cell, and what moves a cell.

A compliance cell's gap is in percentage points, a cost cell's in percent of the published mean;
each is divided by its acceptance tolerance (5 pp, 15 %), so a normalised gap of 1 is exactly on
the target's edge. The distance is the root mean square of the normalised gaps of one pattern.

`testbed fidelity` (testbed.fidelity) measures gaps and distances while it calibrates and sweeps,
and writes its sweep tables below FIDELITY_FOLDER; the report's fidelity section
(reporting.fidelity_section) reads them back and explains misses with `strongest` and
`summarise_effects`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from reporting.paper_comparison import compare

COMPLIANCE_TOLERANCE_PP = 5.0
COST_TOLERANCE_PCT = 15.0
MISSING_GAP = 10.0  # normalised gap of a published cell the runs did not produce
FIDELITY_FOLDER = "fidelity"  # below the runs folder: the sweep tables the report reads


def is_compliance(metric: str) -> bool:
    return metric.endswith("_compliance_pct")


def is_cost(metric: str) -> bool:
    return metric == "resource_cost" or metric.endswith("_total_cost")


def cell_gaps(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per published compliance or cost cell of `reporting.paper_comparison.compare` output: the gap
    (pp or %), its unit, the tolerance, the normalised gap and whether the cell is within target."""
    rows = comparison[[is_compliance(m) or is_cost(m) for m in comparison["metric"]]].copy()
    compliance = np.array([is_compliance(m) for m in rows["metric"]], dtype=bool)
    paper = rows["mean_paper"].to_numpy(dtype=float)
    measured = rows["mean_measured"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(compliance, measured - paper, 100.0 * (measured - paper) / paper)
    tolerance = np.where(compliance, COMPLIANCE_TOLERANCE_PP, COST_TOLERANCE_PCT)
    normalised = np.abs(gap) / tolerance
    rows["gap"] = gap
    rows["unit"] = np.where(compliance, "pp", "%")
    rows["tolerance"] = tolerance
    rows["normalised_gap"] = np.where(np.isnan(normalised), MISSING_GAP, normalised)
    rows["within"] = rows["normalised_gap"] <= 1.0
    return rows.reset_index(drop=True)


@dataclass(frozen=True)
class Distance:
    value: float  # RMS of the normalised gaps
    cells: int
    within: int  # cells within their tolerance
    worst_metric: str
    worst_config: str
    worst_gap: float  # normalised


def distance(measured: pd.DataFrame, reference: pd.DataFrame, pattern: str) -> Distance:
    """The distance of one pattern's measured summary (long format) to its published cells."""
    mine = measured[measured["pattern"] == pattern]
    ref = reference[reference["pattern"] == pattern]
    if ref.empty:
        raise ValueError(f"pattern: no published values for {pattern!r}")
    if mine.empty:  # compare() joins on measured patterns; without runs every cell is missing
        mine = pd.DataFrame({"pattern": [pattern], "approach": [""], "btu_minutes": pd.array([pd.NA], dtype="Int64"),
                             "metric": [""], "mean": [math.nan], "sd": [math.nan], "n": [0]})
    gaps = cell_gaps(compare(mine, ref))
    worst = gaps.loc[gaps["normalised_gap"].idxmax()]
    return Distance(
        value=float(np.sqrt(np.mean(np.square(gaps["normalised_gap"].to_numpy(dtype=float))))),
        cells=len(gaps), within=int(gaps["within"].sum()), worst_metric=str(worst["metric"]),
        worst_config=str(worst["config"]), worst_gap=float(worst["normalised_gap"]),
    )


def strongest(table: pd.DataFrame, config: str, metric: str, top: int = 3) -> List[Tuple[str, str, float]]:
    """The variants moving one cell most: (name, variant, delta), largest |delta| first."""
    rows = table[(table["config"] == config) & (table["metric"] == metric)]
    rows = rows.reindex(rows["delta"].abs().sort_values(ascending=False, kind="mergesort").index)
    return [(str(r.name), str(r.variant), float(r.delta)) for r in rows.head(top).itertuples()]


def summarise_effects(table: pd.DataFrame, metrics: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Per variant: the mean delta of each metric for the baseline and for the BTU policy (mean over
    its BTU lengths; pp for compliance, cost units for costs) and the variant's distance."""
    metrics = list(metrics or ["realtime_compliance_pct", "near_realtime_compliance_pct", "relaxed_compliance_pct",
                               "resource_cost"])
    rows = table[table["metric"].isin(metrics)].copy()
    rows["column"] = [f"{m} {'threshold' if c.startswith('threshold') else 'btu'}"
                      for m, c in zip(rows["metric"], rows["config"], strict=True)]
    wide = rows.pivot_table(index=["group", "name", "variant", "distance"], columns="column", values="delta",
                            aggfunc="mean", sort=False).reset_index()
    ordered = [f"{m} {a}" for m in metrics for a in ("threshold", "btu") if f"{m} {a}" in wide.columns]
    return wide[["group", "name", "variant", *ordered, "distance"]]
