"""The Daedalus evaluation's own report of a runs folder (`testbed experiment`'s job-mode table and
`report(root)`: results, comparison, claims, figures and report.md without Spark)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Optional, Sequence

import pandas as pd

from reporting.evaluations.daedalus.claims import check_claims
from reporting.evaluations.daedalus.claims import fmt as _fmt
from reporting.evaluations.daedalus.figures import figures
from reporting.evaluations.daedalus.measures import comparison, load_reference, results, runs_table, value


def format_results(res: pd.DataFrame) -> str:
    """The main table: per workload and configuration, mean (sd) of the headline metrics."""
    lines = []
    heads = ("mean_workers", "latency_ms", "latency_p95_ms", "rescales", "keeps_up")
    width = max([12, *(len(str(c)) for c in res.config)])  # the longest name keeps the columns aligned
    for pattern in res.pattern.unique():
        lines.append(f"{pattern}")
        lines.append(f"  {'config':{width}s} " + " ".join(f"{h:>22s}" for h in heads))
        for c in dict.fromkeys(res[res.pattern == pattern].config):
            cells = []
            for h in heads:
                sel = res[(res.pattern == pattern) & (res.config == c) & (res.metric == h) & (res.against == "")]
                m, s = (float(sel["mean"].iloc[0]), float(sel["sd"].iloc[0])) if len(sel) else (math.nan, math.nan)
                cells.append(f"{_fmt(m, 1)} ({_fmt(s, 1)})".rjust(22))
            lines.append(f"  {c:{width}s} " + " ".join(cells))
    return "\n".join(lines)


def markdown(comp: pd.DataFrame, claims: pd.DataFrame, res: pd.DataFrame, figs: Sequence[Path]) -> str:
    out = ["# Daedalus evaluation: measured beside published", ""]
    for pattern, g in comp.groupby("pattern", sort=False):
        out += [f"## {pattern}", "",
                "| approach | workers (paper) | workers (measured) | latency ms (paper) | latency ms (measured mean) | "
                "p95 ms | Daedalus saves % (paper) | Daedalus saves % (measured) | keeps up | rescales |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            out.append(f"| {r.approach} | {_fmt(r.paper_workers)} | {_fmt(r.measured_workers, 2)} | "
                       f"{_fmt(r.paper_latency_ms, 0)} | "
                       f"{_fmt(r.measured_latency_ms, 0)} | {_fmt(r.measured_latency_p95_ms, 0)} | "
                       f"{_fmt(r.paper_saved_pct, 0)} | "
                       f"{_fmt(r.measured_saved_pct, 1)} | {_fmt(r.keeps_up, 1)} | {_fmt(r.rescales, 1)} |")
        out.append("")
    dd = res[(res.config == "daedalus") & (res.against == "")]
    if len(dd):
        out += ["## Daedalus internals", "",
                "| workload | capacity error % | WAPE median | loops WAPE < 5 % | fallback loops | "
                "RT predicted s | RT observed s | RT true s | predicted >= observed % |",
                "|---|---|---|---|---|---|---|---|---|"]
        for p in dd.pattern.unique():
            v = lambda m, p=p: value(res, p, "daedalus", m)  # noqa: E731
            out.append(f"| {p} | {_fmt(v('capacity_error_pct'), 2)} | {_fmt(v('forecast_wape_median'), 4)} | "
                       f"{_fmt(v('forecast_wape_below_5_pct'), 1)} | {_fmt(v('fallback_loops'), 1)} | "
                       f"{_fmt(v('rt_predicted_s'), 0)} | "
                       f"{_fmt(v('rt_observed_s'), 0)} | {_fmt(v('rt_true_s'), 0)} | "
                       f"{_fmt(v('rt_predicted_ge_observed_pct'), 1)} |")
        out.append("")
    out += ["## Claims", "", "| claim | verdict | statement | evidence |", "|---|---|---|---|"]
    for _, c in claims.iterrows():
        out.append(f"| {c.claim} | {c.verdict} | {c.statement} | {c.evidence} |")
    out += ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs]
    return "\n".join(out) + "\n"


def report(root: Path, out: Optional[Path] = None) -> Dict[str, Path]:
    """results.csv, comparison.csv, claims.csv, figures and report.md for the job-mode runs below root
    (a workload folder or a runs folder with several workloads)."""
    root = Path(root)
    out = Path(out) if out else root / "report"
    out.mkdir(parents=True, exist_ok=True)
    runs = runs_table(root)
    if runs.empty:
        raise ValueError(f"{root}: no complete job-mode runs")
    res = results(runs)
    comp = comparison(res, load_reference())
    claims = check_claims(res)
    figs = figures(runs, out)
    paths = {"results": out / "results.csv", "comparison": out / "comparison.csv", "claims": out / "claims.csv",
             "runs": out / "runs.csv", "markdown": out / "report.md"}
    res.to_csv(paths["results"], index=False)
    comp.to_csv(paths["comparison"], index=False)
    claims.to_csv(paths["claims"], index=False)
    runs.to_csv(paths["runs"], index=False)
    paths["markdown"].write_text(markdown(comp, claims, res, figs), encoding="utf-8")
    return paths
