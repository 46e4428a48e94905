"""What an evaluation contributes to the report: the extension point.

The report (reporting.report) and the pandas summary (`testbed summary`, reporting.summary) compute
the platform's metrics for every run: SLO compliance, costs in BTUs, actions, elasticity. An
evaluation (experiments/conf/evaluation/<name>.yaml; a run's manifest names it as `experiment`)
adds what its paper measures through one `EvaluationReport`:

* ``reference() -> DataFrame``: the published table in the long format of
  experiments/reference/*.csv (pattern, approach, btu_minutes, metric, mean, sd, note).
* ``compare(summary, reference)`` and ``claims(summary, reference)``: paper vs measured per published
  value (paper_comparison.csv) and the paper's claims as holds / does not hold / not evaluable
  (claims.csv: pattern, claim, text, paper, paper_detail, measured, measured_detail).
* ``run_metrics(run_dir, manifest) -> {metric: value}``: extra per-run metrics, BTU-independent,
  computed with pandas from the run's event log (testbed.eventlog; small tables only). They join the
  long format of results.csv / run_metrics.csv / summary.csv under their own names.
* ``sections(inputs) -> [Section]``: the evaluation's own report sections (tables, figures drawn
  into ``inputs.out / "figures"``); with ``platform_pattern_sections=False`` they replace the
  platform's per-pattern compliance and cost sections for the evaluation's patterns.
* ``tables``: the event-log tables ``run_metrics`` reads; a complete run without one of them (or with
  one unreadable) is damaged and left out, found before the report starts Spark.
* ``summary_columns``: (header, metric, decimals) of the table `testbed summary` prints (empty:
  the platform's compliance and cost table).

Where an evaluation's entry comes from:

* **Its YAML alone** (`declared_report`): `evaluation.reference` (the published table) and
  `evaluation.claims` (claims as data, checked by reporting/claims.py; `evaluation.claims_from:
  <evaluation>` checks another evaluation's). An evaluation that adds no metrics or sections needs
  nothing else; one without a reference or claims shows none. Evaluations declaring the same
  reference and claims share one entry (daedalus_oee uses btu's).
* **Its home**, `reporting/evaluations/<name>.py` (a package `<name>/` when it is big), found by
  discovery (testbed/discovery.py: the modules here that call `register_report(` at the start of a
  line, the entry points of group `testbed.reports`, the modules named in `TESTBED_REPORT_MODULES`):
  its metrics, sections and the claims that need code (comparisons the kinds of
  reporting/claims.py cannot say), registered with `register_report(entry)`. A variant of an
  evaluation (another topology or backend: daedalus_ks, daedalus_live, daedalus_flink, presps_live,
  odp_heuristics) reuses the home's entry with one line there, `register_report(entry, "<variant>")`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from testbed.discovery import discover

_REGISTRY: Dict[str, "EvaluationReport"] = {}

CLAIM_COLUMNS = ["pattern", "claim", "text", "paper", "paper_detail", "measured", "measured_detail"]


@dataclass(frozen=True)
class SectionInputs:
    """What an evaluation's sections are built from."""

    runs: Sequence[Any]  # reporting.run_catalog.RunInfo of the evaluation's complete runs
    summary: pd.DataFrame  # results.csv (all runs of the report)
    comparison: pd.DataFrame  # paper_comparison.csv rows of this evaluation
    claims: pd.DataFrame  # claims.csv rows of this evaluation
    out: Path  # the report folder (figures go to out / "figures")
    dpi: int = 100


def _no_metrics(run_dir: Path, manifest: Any) -> Dict[str, float]:
    return {}


def _no_sections(inputs: SectionInputs) -> List[Any]:
    return []


def _empty_reference() -> pd.DataFrame:
    return pd.DataFrame(columns=["pattern", "approach", "btu_minutes", "metric", "mean", "sd", "note"])


@dataclass(frozen=True)
class EvaluationReport:
    name: str
    reference: Callable[[], pd.DataFrame] = _empty_reference
    compare: Optional[Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]] = None  # None: paper_comparison.compare
    claims: Optional[Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]] = None  # None: no claims
    run_metrics: Callable[[Path, Any], Dict[str, float]] = _no_metrics
    metric_names: Tuple[str, ...] = ()  # run_metrics's names, in report order
    sections: Callable[[SectionInputs], List[Any]] = _no_sections
    platform_pattern_sections: bool = True
    summary_columns: Tuple[Tuple[str, str, int], ...] = ()
    tables: Tuple[str, ...] = ()  # event-log tables run_metrics reads: checked with the report's before Spark


def register_report(entry: EvaluationReport, name: str = "") -> EvaluationReport:
    """Make `entry` the report contribution of evaluation `name` (default: entry.name)."""
    key = name or entry.name
    _REGISTRY[key] = entry if key == entry.name else replace(entry, name=key)
    return entry


def _load() -> None:
    discover("reporting.evaluations", "register_report", "testbed.reports", "TESTBED_REPORT_MODULES")


def report_for(evaluation: str) -> EvaluationReport:
    """The entry of an evaluation: the one registered under its name, else the one its YAML
    declares (reference table and claims; evaluations declaring the same share one entry)."""
    _load()
    return _REGISTRY.get(evaluation) or declared_report(evaluation)


def reports_for(evaluations: Iterable[str]) -> List[EvaluationReport]:
    """The distinct entries of these evaluations, by name."""
    seen: Dict[int, EvaluationReport] = {}
    for name in sorted(set(evaluations)):
        entry = report_for(name)
        seen.setdefault(id(entry), entry)
    return list(seen.values())


def evaluation_metrics(run_dir: Path, manifest: Any) -> Dict[str, float]:
    """The extra metrics of one run (its evaluation's run_metrics)."""
    return dict(report_for(manifest.experiment).run_metrics(Path(run_dir), manifest))


def metric_order() -> List[str]:
    """Every registered evaluation metric, in its entry's order (for sorting long tables)."""
    _load()
    out: List[str] = []
    for entry in _REGISTRY.values():
        out += [m for m in entry.metric_names if m not in out]
    return out


_DECLARED: Dict[Tuple[str, str], EvaluationReport] = {}


def declared_report(evaluation: str) -> EvaluationReport:
    """An entry from the evaluation's YAML alone: its `reference` table beside the measured one and
    its `claims` (or those of `claims_from`) checked by reporting.claims; no metrics, no sections."""
    from reporting import claims as engine

    reference, source = engine.declared_sources(evaluation)
    key = (reference, source)
    if key not in _DECLARED:
        _DECLARED[key] = EvaluationReport(name=source or evaluation, reference=engine.reference_reader(reference),
                                          claims=engine.claim_checker(source) if source else None)
    return _DECLARED[key]


def compare_all(entries: Sequence[EvaluationReport], summary: pd.DataFrame) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(paper_comparison, claims) of several evaluations' entries, stacked."""
    from reporting.paper_comparison import compare

    comparisons, claims = [], []
    for entry in entries:
        ref = entry.reference()
        comparisons.append((entry.compare or compare)(summary, ref))
        if entry.claims is not None:
            claims.append(entry.claims(summary, ref))
    comparison = pd.concat([c for c in comparisons if not c.empty] or comparisons[:1], ignore_index=True)
    claim_table = (pd.concat([c for c in claims if not c.empty] or claims[:1], ignore_index=True)
                   if claims else pd.DataFrame(columns=CLAIM_COLUMNS))
    return comparison, claim_table


__all__ = ["CLAIM_COLUMNS", "EvaluationReport", "SectionInputs", "compare_all", "evaluation_metrics", "metric_order",
           "register_report", "report_for", "reports_for"]
