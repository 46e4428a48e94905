"""Figures (PNG) and summary.md of a study folder (results.csv, trace.csv, machine.json)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from testbed.odp_study.analysis import Claim, claims, degradation, experiment, sweep, time_to_gap, when
from testbed.odp_study.grid import Grid, points  # noqa: E402

COLOURS = {"seq": "tab:blue", "fat": "tab:red"}
LABELS = {"seq": "sequential", "fat": "fat"}


def load(folder: Path, grid: Optional[Grid] = None) -> tuple:
    results = pd.read_csv(folder / "results.csv")
    trace = pd.read_csv(folder / "trace.csv") if (folder / "trace.csv").exists() else pd.DataFrame(
        columns=["run_id", "topo", "t_s", "incumbent", "bound", "gap"])
    if grid is not None:  # only this grid's instances, if the folder holds others too
        ids = {p.instance_id for p in points(grid, int(results["seed"].min()))}
        results = results[results["instance_id"].isin(ids)]
        # the latest run of each instance and kind (a rerun with other settings appends)
        results = results.drop_duplicates(subset=["instance_id", "experiments"], keep="last")
        trace = trace[trace["run_id"].isin(results["run_id"])]
    return results, trace


def _sweep_figure(ax, df: pd.DataFrame, name: str, x: str, xlabel: str) -> None:
    table = sweep(df, name, x)
    cpu = sweep(df, name, x, "cpu_s")
    for topo, rows in table.groupby("topo"):
        ax.plot(rows[x], rows["value"], marker="o", color=COLOURS[topo], label=f"{LABELS[topo]} (wall)")
        own = cpu[cpu["topo"] == topo]
        ax.plot(own[x], own["value"], ls="--", color=COLOURS[topo], alpha=0.6, label=f"{LABELS[topo]} (CPU)")
        limited = rows[rows["limited"] > 0]
        ax.scatter(limited[x], limited["value"], marker="^", s=80, facecolors="none", edgecolors="k",
                   label="time limit (lower bound)" if topo == "fat" and len(limited) else None)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("resolution time (s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def figures(folder: Path, df: pd.DataFrame, trace: pd.DataFrame) -> List[Path]:
    out = []
    for name, x, label in (("fig9a", "n_ops", "operators |V_dsp|"), ("fig9b", "n_nodes", "nodes |V_res|"),
                           ("fig9c", "C_u", "node capacity C_u")):
        if experiment(df, name).empty:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 4))
        _sweep_figure(ax, df, name, x, label)
        ax.set_title(f"{name}: resolution time")
        out.append(_save(fig, folder / f"{name}.png"))
    deg = degradation(df)
    if not deg.empty:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        for topo, rows in deg.groupby("topo"):
            med = rows.groupby("cand_frac").median(numeric_only=True)
            a.plot(med.index * 100, med["time_s"], marker="o", color=COLOURS[topo], label=LABELS[topo])
            b.plot(med.index * 100, med["R_s/R_opt"], marker="o", color=COLOURS[topo],
                   label=f"{LABELS[topo]} R_s/R_opt")
            b.plot(med.index * 100, med["excess"], marker="s", ls="--", color=COLOURS[topo],
                   label=f"{LABELS[topo]} excess")
            b.plot(med.index * 100, med["F_opt/F_s"], marker="x", ls=":", color=COLOURS[topo],
                   label=f"{LABELS[topo]} F_opt/F_s")
        a.set_yscale("log")
        a.set_xlabel("candidate nodes per operator (%)")
        a.set_ylabel("resolution time (s), median over seeds")
        a.set_title("fig10a/b: time with sampled candidates")
        b.set_xlabel("candidate nodes per operator (%)")
        b.set_ylabel("degradation (median over seeds)")
        b.set_title("fig10a/b: degradation")
        for ax in (a, b):
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        out.append(_save(fig, folder / "fig10ab.png"))
    if not trace.empty:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for topo, rows in trace.groupby("topo"):
            rows = rows[rows["gap"].apply(lambda g: not math.isnan(g) and not math.isinf(g))]
            ax.step(rows["t_s"], rows["gap"] * 100, where="post", color=COLOURS[topo], label=LABELS[topo])
        ax.axhline(10, color="grey", ls=":", label="10 %")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("optimality gap (%)")
        ax.set_title("fig10c: gap under a time limit")
        ax.grid(True, alpha=0.3)
        ax.legend()
        out.append(_save(fig, folder / "fig10c.png"))
    return out


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _table(frame: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            cells.append(floatfmt.format(v) if isinstance(v, float) and not math.isnan(v) else
                         ("" if isinstance(v, float) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["experiments", "topo", "n_ops", "n_nodes", "C_u", "cand_frac", "seed", "status", "time_s", "cpu_s",
            "lp_iterations", "bb_nodes", "gap", "response_time_ms", "nx", "ny", "n_paths"]
    return df[cols].sort_values(["experiments", "topo", "n_ops", "n_nodes", "C_u", "cand_frac", "seed"])


def claims_table(found: List[Claim]) -> str:
    lines = ["| claim | paper | test | wall time | CPU time | simplex iterations | measured |",
             "|---|---|---|---|---|---|---|"]
    for c in found:
        lines.append(f"| {c.id} | {c.paper} | {c.test} | **{c.verdict.get('wall')}** | {c.verdict.get('cpu')} | "
                     f"{c.verdict.get('work')} | {c.evidence} |")
    return "\n".join(lines)


def write_report(folder: Path, grid: Grid) -> Path:
    df, trace = load(folder, grid)
    machine = json.loads((folder / "machine.json").read_text()) if (folder / "machine.json").exists() else {}
    figures(folder, df, trace)
    found = claims(df, trace, grid)
    deg = degradation(df)
    parts = [
        f"# ODP scalability study ({grid.name} grid)",
        "",
        f"Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, Python {machine.get('python', '?')}, "
        f"HiGHS {machine.get('highs', '?')}, 1-minute load {machine.get('load_average_1m', '?')} at the start and "
        f"{machine.get('load_average_1m_end', '?')} at the end; study wall time {machine.get('study_wall_s', '?')} s.",
        f"Solver {df['solver'].iloc[0] if len(df) else '?'}, {df['threads'].iloc[0] if len(df) else '?'} thread(s), "
        f"relative gap {df['mip_rel_gap'].iloc[0] if len(df) else '?'}, objective F' (normalised), path constraints; "
        f"per-instance limit {grid.time_limit_s:g} s, trace limit {grid.trace_limit_s:g} s. Times are the solver's "
        "(model building excluded; it is in results.csv as build_s); wall time is the paper's measure, CPU time "
        "what it would be without the neighbours on this shared machine. Table 2 baseline: R_i = 1 s, C_i = 1, S = 1, "
        f"A = 1, d = max(N(22, 5), 1) ms per directed pair, C_u = {grid.capacity:g}.",
        "",
        "## Claims O8-O12",
        "",
        claims_table(found),
        "",
        "## Resolution time per sweep (median over seeds; s)",
        "",
    ]
    for name, x in (("fig9a", "n_ops"), ("fig9b", "n_nodes"), ("fig9c", "C_u")):
        merged = sweep(df, name, x).rename(columns={"value": "time_s"})
        for column in ("cpu_s", "lp_iterations"):
            other = sweep(df, name, x, column).rename(columns={"value": column})
            merged = merged.merge(other[["topo", x, column]], on=["topo", x])
        parts += [f"### {name}", "", _table(merged), ""]
    sc = pd.concat([experiment(df, "sc1").assign(scenario="Sc1"), experiment(df, "sc2").assign(scenario="Sc2")])
    if not sc.empty:
        parts += ["### Sc1 / Sc2", "", _table(sc[["scenario", "topo", "n_ops", "n_nodes", "nx", "ny", "status",
                                                   "time_s", "cpu_s", "lp_iterations"]]), ""]
    if not deg.empty:
        med = deg.groupby(["topo", "cand_frac"]).median(numeric_only=True).reset_index()
        parts += ["## Candidate sampling (Fig. 10a/b; median over seeds)", "",
                  "Degradation against the same seed's full-candidate solve"
                  + (" (time-limited: the best solution found)" if (deg["reference_status"] != "optimal").any() else "")
                  + ". F uses the full instance's bounds; excess = (R_s − ΣR)/(R_opt − ΣR), ΣR the longest "
                  "path's execution time. Infeasible samples count as missing.", "",
                  _table(med[["topo", "cand_frac", "time_s", "cpu_s", "speedup", "cpu_speedup", "work_speedup",
                              "F_opt/F_s", "R_s/R_opt", "excess"]]),
                  "", f"Infeasible samples: {int((deg['status'] == 'infeasible').sum())} of {len(deg)}.", ""]
    if not trace.empty:
        parts += ["## Gap under a time limit (Fig. 10c)", ""]
        for topo in sorted(trace["topo"].unique()):
            last = trace[trace["topo"] == topo].iloc[-1]
            parts.append(f"* {topo}: gap < 10 % {when(time_to_gap(trace, topo))}; at the end "
                         f"({last['t_s']:.1f} s) gap {last['gap']:.4f}, incumbent {last['incumbent']:.4f}, "
                         f"bound {last['bound']:.4f}")
        parts.append("")
    parts += ["## All runs", "", _table(runs_table(df)), "",
              "Figures: " + ", ".join(p.name for p in sorted(folder.glob("fig*.png"))), ""]
    path = folder / "summary.md"
    path.write_text("\n".join(parts))
    return path
