"""Measured results beside the published ones (Tables 3-6 of the paper), and the paper's headline
claims checked on both.

The reference table (experiments/reference/paper_btu_results.csv) and results.csv share their keys
(pattern, approach, btu_minutes, metric), so they join directly; compliance of the re-billed
baseline has an empty btu_minutes in both. The claims are about the paper's two approaches
(BASELINE and BTU); measured approaches the paper does not have are left out of the comparison.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pandas as pd

from reporting.metrics import LEVELS, configurations, rebilled

REFERENCE = Path(__file__).resolve().parent.parent / "experiments" / "reference" / "paper_btu_results.csv"
KEYS = ["pattern", "approach", "btu_minutes", "metric"]
BASELINE, BTU = "threshold", "btu"
BTU_LENGTHS = (10, 30, 60)
LEVEL_LABELS = {"realtime": "real-time", "near_realtime": "near real-time", "relaxed": "relaxed"}

HOLDS, FAILS, NOT_EVALUABLE = "holds", "does not hold", "not evaluable"


def load_reference(path: Path = REFERENCE) -> pd.DataFrame:
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
    mine = measured[KEYS + ["mean", "sd", "n"]].copy()
    mine["btu_minutes"] = pd.array(mine["btu_minutes"], dtype="Int64")
    joined = ref.merge(mine, on=KEYS, how="left", suffixes=("_paper", "_measured"))
    joined["difference"] = joined["mean_measured"] - joined["mean_paper"]
    joined.insert(2, "config", config_labels(joined))
    order = {name: i for i, name in enumerate(dict.fromkeys(reference["metric"]))}
    # per metric: re-billed configurations (the baseline) first, then those billed by their own BTU
    own = {a for a, rows in joined.groupby("approach") if not rebilled(rows)}
    joined = joined.assign(_m=joined["metric"].map(order), _a=joined["approach"].isin(own),
                           _b=joined["btu_minutes"].fillna(-1))
    joined = joined.sort_values(["pattern", "_m", "_a", "_b"], kind="mergesort").drop(columns=["_m", "_a", "_b"])
    columns = ["pattern", "approach", "config", "btu_minutes", "metric", "mean_paper", "sd_paper",
               "mean_measured", "sd_measured", "n", "difference", "note"]
    return joined[columns].reset_index(drop=True)


# ---- claims ---------------------------------------------------------------------------------------

Lookup = Callable[[str, Optional[int], str], Optional[float]]


@dataclass(frozen=True)
class Verdict:
    status: str  # HOLDS, FAILS or NOT_EVALUABLE
    detail: str


def _lookup(table: pd.DataFrame, pattern: str) -> Lookup:
    rows = table[table["pattern"] == pattern]
    values = {}
    for a, b, m, v in zip(rows["approach"], rows["btu_minutes"], rows["metric"], rows["mean"], strict=True):
        values[(a, None if pd.isna(b) else int(b), m)] = None if pd.isna(v) else float(v)

    def get(approach: str, btu: Optional[int], metric: str) -> Optional[float]:
        return values.get((approach, btu, metric))

    return get


def _fmt(v: float) -> str:
    return f"{v:.2f}"


def _missing(names: List[str]) -> Verdict:
    return Verdict(NOT_EVALUABLE, "missing: " + ", ".join(names))


def compliance_above_baseline(v: Lookup) -> Verdict:
    """BTU-based compliance above the baseline's at every level and BTU length."""
    fails, missing = [], []
    for level, _ in LEVELS:
        metric = f"{level}_compliance_pct"
        base = v(BASELINE, None, metric)
        if base is None:
            missing.append(f"{BASELINE} {metric}")
            continue
        for b in BTU_LENGTHS:
            mine = v(BTU, b, metric)
            if mine is None:
                missing.append(f"btu-{b} {metric}")
            elif not mine > base:
                fails.append(f"btu-{b} {LEVEL_LABELS[level]} {_fmt(mine)} <= {_fmt(base)}")
    if missing:
        return _missing(missing)
    return Verdict(FAILS, "; ".join(fails)) if fails else Verdict(HOLDS, "every level and BTU length")


def btu60_resource_cost_below_baseline(v: Lookup) -> Verdict:
    mine, base = v(BTU, 60, "resource_cost"), v(BASELINE, 60, "resource_cost")
    if mine is None or base is None:
        return _missing([n for n, x in (("btu-60 resource_cost", mine), ("threshold@60 resource_cost", base))
                         if x is None])
    saving = 100.0 * (base - mine) / base if base else float("nan")
    detail = f"{_fmt(mine)} vs {_fmt(base)} ({saving:.0f} % lower)" if mine < base else f"{_fmt(mine)} >= {_fmt(base)}"
    return Verdict(HOLDS if mine < base else FAILS, detail)


def only_btu10_realtime_total_cost_above(v: Lookup) -> Verdict:
    """The BTU policy's total cost exceeds the baseline's (billed under the same BTU) at most for
    BTU10 at the real-time level; everywhere else it is not higher."""
    above, missing = [], []
    for b in BTU_LENGTHS:
        for level, _ in LEVELS:
            metric = f"{level}_total_cost"
            mine, base = v(BTU, b, metric), v(BASELINE, b, metric)
            if mine is None or base is None:
                missing.append(f"{b} {metric}")
            elif mine > base:
                above.append((b, level, mine, base))
    if missing:
        return _missing(missing)
    listed = "; ".join(f"btu-{b} {LEVEL_LABELS[lv]} {_fmt(m)} > {_fmt(x)}" for b, lv, m, x in above)
    others = [a for a in above if (a[0], a[1]) != (10, "realtime")]
    if others:
        return Verdict(FAILS, "above the baseline: " + listed)
    return Verdict(HOLDS, ("above the baseline only: " + listed) if above else "never above the baseline")


def compliance_rising_with_btu(v: Lookup) -> Verdict:
    """At each level compliance does not fall from BTU10 to BTU30 to BTU60 and BTU60 > BTU10."""
    fails, missing = [], []
    for level, _ in LEVELS:
        metric = f"{level}_compliance_pct"
        a, b, c = (v(BTU, length, metric) for length in BTU_LENGTHS)
        if a is None or b is None or c is None:
            missing.append(metric)
            continue
        if not (a <= b <= c and a < c):
            fails.append(f"{LEVEL_LABELS[level]} {_fmt(a)}, {_fmt(b)}, {_fmt(c)}")
    if missing:
        return _missing(missing)
    return Verdict(FAILS, "; ".join(fails)) if fails else Verdict(HOLDS, "every level")


CLAIMS: Tuple[Tuple[str, str, Callable[[Lookup], Verdict]], ...] = (
    ("compliance_above_baseline", "BTU-based compliance above the baseline at every level (BTU 10/30/60)",
     compliance_above_baseline),
    ("btu60_resource_cost_below_baseline", "BTU60 resource cost below the baseline's BTU60 cost",
     btu60_resource_cost_below_baseline),
    ("only_btu10_realtime_total_cost_above", "Only BTU10 real-time total cost above the baseline's",
     only_btu10_realtime_total_cost_above),
    ("compliance_rising_with_btu", "Compliance rising from BTU10 to BTU60 at every level",
     compliance_rising_with_btu),
)


def check_claims(measured: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per measured pattern and claim: the verdict on the paper's own numbers and on the measured ones."""
    rows = []
    for pattern in sorted(set(measured["pattern"])):
        mine, paper = _lookup(measured, pattern), _lookup(reference, pattern)
        for claim_id, text, check in CLAIMS:
            on_paper, on_measured = check(paper), check(mine)
            rows.append({"pattern": pattern, "claim": claim_id, "text": text,
                         "paper": on_paper.status, "paper_detail": on_paper.detail,
                         "measured": on_measured.status, "measured_detail": on_measured.detail})
    return pd.DataFrame(rows,
                        columns=["pattern", "claim", "text", "paper", "paper_detail", "measured", "measured_detail"])
