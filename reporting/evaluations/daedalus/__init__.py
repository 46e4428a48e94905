"""The Daedalus paper's report contribution (Pfister et al., ICPE 2024; docs/papers/daedalus.md):
job-mode metrics per run (mean workers, latency mean/p95, rescales, keeps-up, capacity-estimate
error, forecast WAPE, predicted vs observed recovery time, excess workers on falling/rising load),
Daedalus' savings against every other configuration, the published table beside the measured one,
claims D1-D10 and the figures (workers and latency over time, latency ECDF): measures.py (per-run
metrics, results, the comparison), claims.py, figures.py, engine_gap.py (a configuration simulated
beside its Flink run: Simulator vs Flink) and text.py (the evaluation's own report without Spark,
and the job-mode table `testbed experiment` prints); this module registers them at the extension
point. A variant (daedalus_ks, daedalus_live, daedalus_flink) reuses the whole report
by its registration below."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

import pandas as pd

from reporting.evaluations import CLAIM_COLUMNS, EvaluationReport, SectionInputs, register_report
from reporting.evaluations.daedalus import engine_gap
from reporting.evaluations.daedalus import measures as dd
from reporting.evaluations.daedalus.claims import check_claims
from reporting.evaluations.daedalus.claims import fmt as _fmt
from reporting.evaluations.daedalus.figures import figures

METRICS = tuple(m for m in dd.METRICS if m != "workers_per_12") + ("workers_per_12",)
SUMMARY = (("workers", "mean_workers", 2), ("latency ms", "latency_ms", 0), ("p95 ms", "latency_p95_ms", 0),
           ("rescales", "rescales", 1), ("keeps up", "keeps_up", 2), ("cap. err %", "capacity_error_pct", 2),
           ("WAPE", "forecast_wape_median", 4), ("RT pred s", "rt_predicted_s", 0), ("RT true s", "rt_true_s", 0))


def run_metrics(run_dir: Path, manifest: Any) -> Dict[str, float]:
    return dd.run_metrics(Path(run_dir)) if dd.is_job_run(Path(run_dir)) else {}


def reference() -> pd.DataFrame:
    ref = dd.load_reference()
    return pd.DataFrame({"pattern": ref.pattern, "approach": ref.approach,
                         "btu_minutes": pd.array([pd.NA] * len(ref), dtype="Int64"), "metric": ref.metric,
                         "mean": ref.value, "sd": math.nan, "note": ref.note.fillna("")})


def _long(summary: pd.DataFrame) -> pd.DataFrame:
    """The report's results.csv rows of job-mode metrics as the long format of measures.results."""
    rows = summary[summary.metric.isin(dd.METRICS)]
    col = "config" if "config" in rows else "approach"
    out = pd.DataFrame({"pattern": rows.pattern, "config": rows[col], "backend": dd.backends(rows),
                        "metric": rows.metric, "against": "",
                        "mean": rows["mean"], "sd": rows.get("sd", math.nan), "n": rows.get("n", 1)})
    backend_of = dict(zip(out.config, out.backend, strict=True))
    workers = out[out.metric == "mean_workers"].set_index(["pattern", "config"])["mean"]
    extra = []
    for (p, c), mine in workers.items():
        for (p2, o), theirs in workers.items():
            if p2 == p and o != c and theirs:
                extra.append({"pattern": p, "config": c, "backend": backend_of[c], "metric": "workers_saved_pct",
                              "against": o,
                              "mean": (theirs - mine) / theirs * 100.0, "sd": math.nan, "n": 1})
    return pd.concat([out, pd.DataFrame(extra)], ignore_index=True)


def claims(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    res = _long(summary)
    if not len(res):
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    c = check_claims(res)
    where = {"D1": "wc_sine", "D2": "ysb_avazu", "D3": "tm_two_spike", "D4": "ks_sine"}
    return pd.DataFrame({"pattern": [where.get(k, "all") for k in c.claim], "claim": c.claim, "text": c.statement,
                         "paper": "holds", "paper_detail": "",
                         "measured": c.verdict, "measured_detail": c.evidence})[CLAIM_COLUMNS]


def compare(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """paper_comparison.csv: the platform's long comparison, matched on the configuration's name
    (hpa-80, static-12, ...) rather than the policy's."""
    from reporting.paper_comparison import compare as platform_compare

    if "config" not in summary:
        return platform_compare(summary, ref)
    return platform_compare(pd.concat([summary.assign(approach=summary["config"]), _savings(summary)],
                                      ignore_index=True), ref)


def _savings(summary: pd.DataFrame) -> pd.DataFrame:
    """The published "Daedalus uses fewer workers than X by %" cells, measured: rows of approach X."""
    res = _long(summary)
    names = dd.ran(res)
    res = res[res.metric == "workers_saved_pct"]
    keep = [names[m] == ("daedalus", names[t][1]) for m, t in zip(res.config, res.against, strict=True)]  # same engine
    mine = res[pd.Series(keep, index=res.index, dtype=bool)]
    return pd.DataFrame({"pattern": mine.pattern, "approach": mine.against, "config": mine.against,
                         "btu_minutes": pd.array([pd.NA] * len(mine), dtype="Int64"), "metric": mine.metric,
                         "mean": mine["mean"], "sd": math.nan, "n": mine.n})


def sections(inputs: SectionInputs) -> List[Any]:
    from reporting.report_document import Block, Figure, Section, Table

    runs = pd.DataFrame([{"pattern": r.pattern, "config": r.manifest.config, "rep": r.manifest.rep,
                          "run_dir": str(r.run_dir)} for r in inputs.runs])
    if runs.empty:
        return []
    figs = figures(runs, inputs.out / "figures")
    res = _long(inputs.summary)
    comp = dd.comparison(res, dd.load_reference())
    out = []
    for pattern, g in comp.groupby("pattern", sort=False):
        rows = [[r.approach, _fmt(r.paper_workers), _fmt(r.measured_workers, 2), _fmt(r.paper_latency_ms, 0),
                 _fmt(r.measured_latency_ms, 0), _fmt(r.measured_latency_p95_ms, 0),
                 _fmt(r.paper_saved_pct, 0),
                 _fmt(r.measured_saved_pct, 1), _fmt(r.keeps_up, 1), _fmt(r.rescales, 1)]
                for _, r in g.iterrows()]
        table = Table(f"{pattern}: published (ICPE 2024) beside measured, mean over repetitions",
                      ["approach", "workers (paper)", "workers", "latency ms (paper)", "latency ms", "p95 ms",
                       "Daedalus saves % (paper)", "Daedalus saves %", "keeps up", "rescales"], rows)
        items: List[Block] = [table, *(Figure(p.stem.replace("_", " "), p) for p in figs if f"_{pattern}_" in p.name)]
        out.append(Section(f"Daedalus: {pattern}", items))
    return out + engine_gap.sections(runs)  # a configuration both simulated and run on Flink


DAEDALUS = register_report(EvaluationReport(
    name="daedalus", reference=reference, compare=compare, claims=claims, run_metrics=run_metrics, metric_names=METRICS,
    sections=sections, platform_pattern_sections=False, summary_columns=SUMMARY, tables=dd.TABLES))
register_report(DAEDALUS, "daedalus_ks")  # the Kafka Streams variant: same metrics, reference and claims
register_report(DAEDALUS, "daedalus_live")  # live and scaled down (testbed/live/job.py): the same report
register_report(DAEDALUS, "daedalus_flink")  # on a real Flink (testbed/live/flink_job.py): the same report
