"""The report of the `compare` evaluation: every approach on one workload, priced alike.

Per workload and BTU length (the BTU policy billed by its own BTU, every other approach re-billed
under 10, 30 and 60 minutes), a leaderboard ranked by the total cost at real-time compliance, with
the resource cost, the other compliance levels, instances, hosts, rescales, time to adapt and the
SPEC RG elasticity metrics of results.csv; a cost-against-compliance figure marking the Pareto-
optimal approaches; and, per approach, what its scaling decisions said (their reasons, numbers
masked, counted over all repetitions). No paper publishes this comparison: no reference, no claims.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pandas as pd

from reporting.evaluations import EvaluationReport, SectionInputs, register_report

BTU_LENGTHS = (10, 30, 60)
RANK_BY = "realtime_total_cost"
# (header, results.csv metric, decimals); "rescales" is scale_ups + scale_downs
COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("total cost RT", "realtime_total_cost", 2), ("total cost NRT", "near_realtime_total_cost", 2),
    ("total cost relaxed", "relaxed_total_cost", 2), ("resource cost", "resource_cost", 2),
    ("RT %", "realtime_compliance_pct", 1), ("NRT %", "near_realtime_compliance_pct", 1),
    ("mean instances", "mean_instances", 1), ("mean hosts", "mean_leased_vms", 2), ("rescales", "rescales", 0),
    ("time to adapt s", "time_to_adapt_s", 0), ("under acc. %", "elasticity_under_accuracy_pct", 1),
    ("over acc. %", "elasticity_over_accuracy_pct", 1), ("under time %", "elasticity_under_timeshare_pct", 1),
    ("over time %", "elasticity_over_timeshare_pct", 1), ("instability %", "elasticity_instability_pct", 1),
)
SCALING_ACTIONS = ("scale_up", "scale_down", "activate", "deactivate", "restart", "migrate")
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _value(rows: pd.DataFrame, config: str, btu: int, metric: str) -> Tuple[float, float]:
    """Mean and sd of a metric of a configuration under a BTU length (a BTU-independent metric has
    one value for every length, or an empty BTU length)."""
    mine = rows[(rows["config"] == config) & (rows["metric"] == metric)]
    if mine.empty:
        return math.nan, math.nan
    exact = mine[mine["btu_minutes"] == btu]
    row = (exact if not exact.empty else mine).iloc[0]
    return float(row["mean"]), float(row["sd"]) if pd.notna(row["sd"]) else math.nan


def leaderboard(summary: pd.DataFrame, pattern: str, btu: int) -> pd.DataFrame:
    """One row per configuration billed under `btu` (own-billed ones only under their own BTU),
    ranked by total cost at real-time compliance; `pareto` marks the configurations no other one
    beats on both resource cost and real-time compliance."""
    rows = summary[summary["pattern"] == pattern].copy()
    rows["btu_minutes"] = pd.to_numeric(rows["btu_minutes"], errors="coerce")
    billed = rows[(rows["metric"] == "resource_cost") & (rows["btu_minutes"] == btu)]["config"].unique()
    table = []
    for config in billed:
        entry: Dict[str, Any] = {"config": config}
        for _, metric, _ in COLUMNS:
            if metric == "rescales":
                up, _ = _value(rows, config, btu, "scale_ups")
                down, _ = _value(rows, config, btu, "scale_downs")
                entry[metric], entry[f"{metric}_sd"] = up + down, math.nan
            else:
                entry[metric], entry[f"{metric}_sd"] = _value(rows, config, btu, metric)
        table.append(entry)
    frame = pd.DataFrame(table)
    if frame.empty:
        return frame
    frame["pareto"] = pareto_front(frame["resource_cost"].tolist(), frame["realtime_compliance_pct"].tolist())
    return frame.sort_values([RANK_BY, "config"], kind="stable").reset_index(drop=True)


def pareto_front(cost: Sequence[float], compliance: Sequence[float]) -> List[bool]:
    """Whether each point is Pareto-optimal: no other point has cost <= and compliance >=, with one
    of the two strictly better."""
    out = []
    for i, (c, q) in enumerate(zip(cost, compliance, strict=True)):
        dominated = any(j != i and c2 <= c and q2 >= q and (c2 < c or q2 > q)
                        for j, (c2, q2) in enumerate(zip(cost, compliance, strict=True)))
        out.append(not dominated and not (math.isnan(c) or math.isnan(q)))
    return out


def _cell(mean: float, sd: float, decimals: int) -> str:
    if math.isnan(mean):
        return "–"
    text = f"{mean:.{decimals}f}"
    return text if math.isnan(sd) else f"{text} ± {sd:.{decimals}f}"


def leaderboard_table(frame: pd.DataFrame, pattern: str, btu: int):
    from reporting.report_document import Table

    headers = ["rank", "configuration", "Pareto"] + [h for h, _, _ in COLUMNS]
    rows = [[str(i + 1), r["config"], "yes" if r["pareto"] else ""]
            + [_cell(r[m], r[f"{m}_sd"], d) for _, m, d in COLUMNS] for i, r in frame.iterrows()]
    return Table(f"{pattern}, billed in {btu}-minute BTUs: ranked by total cost at real-time compliance "
                 "(mean ± sd over repetitions; Pareto: no approach has both lower resource cost and "
                 "higher real-time compliance)", headers, rows)


def pareto_figure(boards: Dict[int, pd.DataFrame], pattern: str, out: Path, dpi: int) -> Optional[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    boards = {b: f for b, f in boards.items() if not f.empty}
    if not boards:
        return None
    names = sorted({c for f in boards.values() for c in f["config"]})
    palette = plt.get_cmap("tab10")
    colour = {c: palette(i % 10) for i, c in enumerate(names)}  # one colour per approach in every panel
    fig, axes = plt.subplots(1, len(boards), figsize=(5.0 * len(boards), 4.2), squeeze=False)
    for ax, (btu, frame) in zip(axes[0], sorted(boards.items()), strict=False):
        front = frame[frame["pareto"]].sort_values("resource_cost")
        ax.plot(front["resource_cost"], front["realtime_compliance_pct"], color="grey", linewidth=1, zorder=1)
        for _, r in frame.iterrows():
            ax.scatter(r["resource_cost"], r["realtime_compliance_pct"], s=40 if r["pareto"] else 20,
                       marker="o" if r["pareto"] else "x", color=colour[r["config"]], zorder=2)
            ax.annotate(r["config"], (r["resource_cost"], r["realtime_compliance_pct"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_title(f"{pattern}: BTU {btu} min")
        ax.set_xlabel("resource cost")
        ax.set_ylabel("real-time compliance %")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    folder = out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"compare_pareto_{pattern}.png"
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return path


def reason_summary(runs: Sequence[Any], top: int = 4) -> pd.DataFrame:
    """Per configuration: its scaling actions by kind, and its most frequent reasons (numbers masked
    as #, so that 'queue 37 > 30' and 'queue 41 > 30' count as one), over all repetitions."""
    from testbed.eventlog import EventLog

    counts: Dict[str, Counter] = {}
    reasons: Dict[str, Counter] = {}
    for run in runs:
        actions = EventLog(run.run_dir).read("actions")
        scaling = actions[actions["action"].isin(SCALING_ACTIONS) & (actions["t_s"] > 0)]
        counts.setdefault(run.config, Counter()).update(scaling["action"].tolist())
        masked = scaling["reason"].fillna("").map(lambda s: NUMBER.sub("#", str(s))[:90])
        reasons.setdefault(run.config, Counter()).update(masked.tolist())
    rows = []
    for config in sorted(counts):
        n = sum(1 for r in runs if r.config == config)
        kinds = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(counts[config].items()))
        said = "; ".join(f"{text or '(none)'} ({v / n:.1f})" for text, v in reasons[config].most_common(top))
        rows.append({"config": config, "actions per run": kinds or "none", "top reasons per run": said or "none"})
    return pd.DataFrame(rows)


def sections(inputs: SectionInputs) -> List[Any]:
    from reporting.report_document import Figure, Section, Table

    out: List[Any] = []
    for pattern in sorted({r.pattern for r in inputs.runs}):
        boards = {btu: leaderboard(inputs.summary, pattern, btu) for btu in BTU_LENGTHS}
        blocks: List[Any] = [leaderboard_table(f, pattern, btu) for btu, f in boards.items() if not f.empty]
        path = pareto_figure(boards, pattern, inputs.out, inputs.dpi)
        if path is not None:
            blocks.append(Figure("Resource cost against real-time compliance; the line joins the Pareto-optimal "
                                 "approaches", path))
        why = reason_summary([r for r in inputs.runs if r.pattern == pattern])
        blocks.append(Table("What each approach's scaling decisions said (per run; numbers masked as #)",
                            list(why.columns), why.astype(str).values.tolist()))
        out.append(Section(f"Comparison of every approach: {pattern}", blocks))
    return out


COMPARE = register_report(EvaluationReport(name="compare", sections=sections, platform_pattern_sections=True))
