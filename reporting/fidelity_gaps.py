"""How far a measured summary lands from the published table, cell by cell, and what moves a cell.

Each evaluation says how its published metrics are measured (`evaluation.fidelity.cells`, kinds in
testbed.fidelity_spec): a percentage in points, a fraction in points, a count or cost relative to
the published value, a latency as a ratio. Each gap is divided by its kind's tolerance (5 pp,
15 %, x1.3), so a normalised gap of 1 is exactly on the target's edge. The distance is the root
mean square of the normalised gaps of one pattern. The BTU paper's cells (compliance in points,
costs relative) are the default.

`testbed fidelity` (testbed.fidelity) measures gaps and distances while it calibrates and sweeps,
and writes its sweep tables below FIDELITY_FOLDER; the report's fidelity section
(reporting.fidelity_section) reads them back and explains misses with `strongest` and
`summarise_effects`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from reporting.paper_comparison import compare
from testbed.fidelity_spec import CELL_KINDS, cell_kind

MISSING_GAP = 10.0  # normalised gap of a published cell the runs did not produce
FIDELITY_FOLDER = "fidelity"  # below the runs folder: the sweep tables the report reads
# The BTU paper's cells: compliance in percentage points, costs relative to the published value.
BTU_CELLS: Mapping[str, str] = {"*_compliance_pct": "points", "resource_cost": "relative", "*_total_cost": "relative"}
UNITS = {"points": "pp", "share": "pp", "relative": "%", "ratio": "x", "absolute": ""}


def is_compliance(metric: str) -> bool:
    return metric.endswith("_compliance_pct")


def is_cost(metric: str) -> bool:
    return metric == "resource_cost" or metric.endswith("_total_cost")


def kind_gap(kind: str, reference: float, measured: float) -> Tuple[float, float]:
    """(gap in the kind's unit, gap normalised by the kind's tolerance) of a measured value against
    its reference (the published value, or a live run's in reporting.live_gap); NaN when not
    measurable."""
    return _gap(kind, reference, measured)


def _gap(kind: str, paper: float, measured: float) -> Tuple[float, float]:
    """(gap in the kind's unit, gap normalised by the kind's tolerance); NaN when not measurable."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "ratio":
            ratio = measured / paper if paper > 0 and measured > 0 else math.nan
            return ratio, abs(math.log(ratio)) / math.log(1.0 + CELL_KINDS[kind] / 100.0)
        if kind == "relative":
            gap = 100.0 * (measured - paper) / paper if paper else math.nan
        elif kind == "share":
            gap = 100.0 * (measured - paper)
        else:
            gap = measured - paper
    return gap, abs(gap) / CELL_KINDS[kind]


def cell_gaps(comparison: pd.DataFrame, cells: Mapping[str, str] = BTU_CELLS) -> pd.DataFrame:
    """Per published cell of a paper comparison (reporting.paper_comparison.compare or an
    evaluation's own) whose metric `cells` names: the gap in its kind's unit, the tolerance, the
    normalised gap (1 = on the tolerance's edge; MISSING_GAP when not measured) and whether the
    cell is within target."""
    found = [cell_kind(str(m), cells) for m in comparison["metric"]]
    rows = comparison[[k is not None for k in found]].copy()
    kinds = [k for k in found if k is not None]
    pairs = [_gap(k, float(p), float(m)) if not (pd.isna(p) or pd.isna(m)) else (math.nan, math.nan)
             for k, p, m in zip(kinds, rows["mean_paper"], rows["mean_measured"], strict=True)]
    normalised = np.array([n for _, n in pairs], dtype=float)
    rows["gap"] = np.array([g for g, _ in pairs], dtype=float)
    rows["unit"] = [UNITS[k] for k in kinds]
    rows["tolerance"] = [CELL_KINDS[k] for k in kinds]
    rows["normalised_gap"] = np.where(np.isnan(normalised), MISSING_GAP, normalised)
    rows["within"] = rows["normalised_gap"] <= 1.0
    rows["kind"] = kinds
    return rows.reset_index(drop=True)


@dataclass(frozen=True)
class Distance:
    value: float  # RMS of the normalised gaps
    cells: int
    within: int  # cells within their tolerance
    worst_metric: str
    worst_config: str
    worst_gap: float  # normalised


def gaps_distance(gaps: pd.DataFrame) -> Distance:
    """The RMS of the normalised gaps of `cell_gaps`, and the worst cell."""
    if gaps.empty:
        raise ValueError("no published cells to measure a distance on")
    worst = gaps.loc[gaps["normalised_gap"].idxmax()]
    return Distance(
        value=float(np.sqrt(np.mean(np.square(gaps["normalised_gap"].to_numpy(dtype=float))))),
        cells=len(gaps), within=int(gaps["within"].sum()), worst_metric=str(worst["metric"]),
        worst_config=str(worst["config"]), worst_gap=float(worst["normalised_gap"]),
    )


def distance(measured: pd.DataFrame, reference: pd.DataFrame, pattern: str,
             cells: Mapping[str, str] = BTU_CELLS,
             comparer: Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame] = compare) -> Distance:
    """The distance of one pattern's measured summary (long format) to its published cells;
    `comparer` pairs them (an evaluation's own comparison, or the platform's)."""
    mine = measured[measured["pattern"] == pattern]
    ref = reference[reference["pattern"] == pattern]
    if ref.empty:
        raise ValueError(f"pattern: no published values for {pattern!r}")
    if mine.empty:  # compare() joins on measured patterns; without runs every cell is missing
        mine = pd.DataFrame({"pattern": [pattern], "approach": [""], "btu_minutes": pd.array([pd.NA], dtype="Int64"),
                             "metric": [""], "mean": [math.nan], "sd": [math.nan], "n": [0]})
    return gaps_distance(cell_gaps(comparer(mine, ref), cells))


def strongest(table: pd.DataFrame, config: str, metric: str, top: int = 3) -> List[Tuple[str, str, float]]:
    """The variants moving one cell most: (name, variant, delta), largest |delta| first."""
    rows = table[(table["config"] == config) & (table["metric"] == metric)]
    rows = rows.reindex(rows["delta"].abs().sort_values(ascending=False, kind="mergesort").index)
    return [(str(r.name), str(r.variant), float(r.delta)) for r in rows.head(top).itertuples()]


def summarise_effects(table: pd.DataFrame, metrics: Optional[Sequence[str]] = None,
                      by_btu: bool = True) -> pd.DataFrame:
    """Per variant: the mean delta of each metric (pp for compliance, cost units for costs, the
    metric's unit otherwise) and the variant's distance; `by_btu` splits each metric into the
    baseline and the BTU policy (mean over its BTU lengths)."""
    if metrics is None:
        metrics = (["realtime_compliance_pct", "near_realtime_compliance_pct", "relaxed_compliance_pct",
                    "resource_cost"] if by_btu else list(dict.fromkeys(table["metric"])))
    rows = table[table["metric"].isin(list(metrics))].copy()
    if by_btu:
        rows["column"] = [f"{m} {'threshold' if c.startswith('threshold') else 'btu'}"
                          for m, c in zip(rows["metric"], rows["config"], strict=True)]
        order = [f"{m} {a}" for m in metrics for a in ("threshold", "btu")]
    else:
        rows["column"], order = rows["metric"], list(metrics)
    wide = rows.pivot_table(index=["group", "name", "variant", "distance"], columns="column", values="delta",
                            aggfunc="mean", sort=False).reset_index()
    ordered = [c for c in order if c in wide.columns]
    return wide[["group", "name", "variant", *ordered, "distance"]]
