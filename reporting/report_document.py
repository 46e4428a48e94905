"""The content of a report as plain data (sections of paragraphs, tables, figures), built once and
rendered twice: index.html (reporting.html_report) and report.md (reporting.markdown_report)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd

from reporting.elasticity import ELASTICITY_METRICS
from reporting.metrics import LEVEL_LABELS, LEVELS, rebilled
from reporting.report_metrics import compliance_metric
from reporting.run_catalog import RunCatalog


@dataclass
class Table:
    caption: str
    headers: List[str]
    rows: List[List[str]]


@dataclass
class Figure:
    caption: str
    path: Path  # the PNG (HTML embeds it, Markdown links it relative to the report folder)


@dataclass
class Preformatted:
    summary: str  # shown collapsed in HTML
    text: str


Block = Union[str, Table, Figure, Preformatted]


@dataclass
class Section:
    title: str
    blocks: List[Block] = field(default_factory=list)


@dataclass
class Document:
    title: str
    intro: List[str]
    sections: List[Section]


def mean_sd(mean: Optional[float], sd: Optional[float], decimals: int = 2) -> str:
    if mean is None or pd.isna(mean):
        return "–"
    text = f"{float(mean):.{decimals}f}"
    if sd is not None and not pd.isna(sd):
        text += f" ± {float(sd):.{decimals}f}"
    return text


def number(value: Optional[float], decimals: int = 2, signed: bool = False) -> str:
    if value is None or pd.isna(value):
        return "–"
    return f"{float(value):{'+' if signed else ''}.{decimals}f}"


# (header, metric, decimals) of the per-pattern measured tables
_MAIN_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    *((f"{LEVEL_LABELS[lv]} %", f"{lv}_compliance_pct", 1) for lv, _ in LEVELS),
    ("real-time % (all ops)", "realtime_compliance_all_pct", 1),
    ("paid BTUs", "paid_btus", 1),
    ("resource cost", "resource_cost", 2),
    *((f"total {LEVEL_LABELS[lv]}", f"{lv}_total_cost", 2) for lv, _ in LEVELS),
)
_ACTION_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("VM leases", "vm_leases", 1), ("prolongations", "vm_prolongations", 1),
    ("releases", "vm_releases", 1), ("early releases", "vm_early_releases", 1),
    ("scale-ups", "scale_ups", 1), ("scale-downs", "scale_downs", 1), ("migrations", "migrations", 1),
    ("time to adapt [s]", "time_to_adapt_s", 1), ("mean instances", "mean_instances", 1),
    ("mean VMs", "mean_leased_vms", 2),
)
_ELASTICITY_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("under-prov. accuracy %", "elasticity_under_accuracy_pct", 1),
    ("over-prov. accuracy %", "elasticity_over_accuracy_pct", 1),
    ("under-prov. timeshare %", "elasticity_under_timeshare_pct", 1),
    ("over-prov. timeshare %", "elasticity_over_timeshare_pct", 1),
    ("instability %", "elasticity_instability_pct", 1),
    ("mean demand [inst.]", "mean_demand_instances", 1),
    ("mean supply [inst.]", "mean_supply_instances", 1),
)
assert {m for _, m, _ in _ELASTICITY_COLUMNS} >= set(ELASTICITY_METRICS)


def _config_rows(summary: pd.DataFrame) -> List[Tuple[str, str, Optional[int]]]:
    """(label, config, btu) per table row: a re-billed configuration (the baseline) once per billing
    BTU, one billed by its own BTU once; re-billed ones first, then by BTU length."""
    out = []
    for config, rows in summary.groupby("config", sort=False):
        own = not rebilled(rows)
        btus: Sequence[Optional[int]] = sorted({int(b) for b in rows["btu_minutes"].dropna()})
        for b in btus or [None]:
            label = config if own or b is None else f"{config}@{b}"
            out.append((label, config, b, own))
    out.sort(key=lambda r: (r[3], -1 if r[2] is None else r[2], r[1]))
    return [(label, config, b) for label, config, b, _ in out]


def config_order(summary: pd.DataFrame) -> List[str]:
    """The configurations in the order of the report's tables (for the figures' legends)."""
    return list(dict.fromkeys(config for _, config, _ in _config_rows(summary)))


_Stats = Tuple[Optional[float], Optional[float], int]  # mean, sd, n


def _lookup(summary: pd.DataFrame) -> Callable[[str, Optional[int], str], _Stats]:
    values: Dict[Tuple[str, Optional[int], str], _Stats] = {}
    for c, b, m, mean, sd, n in zip(summary["config"], summary["btu_minutes"], summary["metric"],
                                    summary["mean"], summary["sd"], summary["n"], strict=True):
        values[(c, None if pd.isna(b) else int(b), m)] = (mean, sd, n)

    def get(config: str, btu: Optional[int], metric: str) -> _Stats:
        return values.get((config, btu, metric), values.get((config, None, metric), (None, None, 0)))

    return get


def measured_table(summary: pd.DataFrame, columns: Sequence[Tuple[str, str, int]], caption: str) -> Table:
    get = _lookup(summary)
    rows = []
    for label, config, btu in _config_rows(summary):
        n = get(config, btu, columns[0][1])[2]
        rows.append([label, str(n)] + [mean_sd(*get(config, btu, m)[:2], d) for _, m, d in columns])
    return Table(caption, ["configuration", "n"] + [h for h, _, _ in columns], rows)


def per_operator_table(summary: pd.DataFrame, level: str) -> Table:
    get = _lookup(summary)
    prefix, suffix = f"{level}_compliance_", "_pct"
    operators = sorted({m[len(prefix):-len(suffix)] for m in summary["metric"]
                        if m.startswith(prefix) and m.endswith(suffix)
                        and m[len(prefix):-len(suffix)] not in ("", "all")})
    rows = []
    seen = set()
    for _, config, btu in _config_rows(summary):
        if config in seen:  # BTU-independent: one row per configuration
            continue
        seen.add(config)
        rows.append([config] + [mean_sd(*get(config, btu, compliance_metric(level, op))[:2], 1) for op in operators])
    return Table(f"{LEVEL_LABELS[level]} compliance per operator [%] (mean ± sd)", ["configuration"] + operators, rows)


def comparison_table(comparison: pd.DataFrame, pattern: str) -> Table:
    rows = comparison[comparison["pattern"] == pattern]
    body = [[r.metric, r.config, mean_sd(r.mean_paper, r.sd_paper), mean_sd(r.mean_measured, r.sd_measured),
             number(r.difference, signed=True), r.note] for r in rows.itertuples()]
    return Table("Paper vs measured (mean ± sd; difference = measured − paper)",
                 ["metric", "configuration", "paper", "measured", "difference", "note"], body)


def claims_table(claims: pd.DataFrame) -> Table:
    rows = [[r.pattern, r.text, r.paper, r.measured, r.measured_detail, r.paper_detail] for r in claims.itertuples()]
    return Table("The paper's claims on its own numbers and on the measured ones",
                 ["pattern", "claim", "paper", "measured", "measured: detail", "paper: detail"], rows)


def runs_table(catalog: RunCatalog) -> Table:
    frame = catalog.runs_frame()
    headers = ["pattern", "config", "rep", "status", "seed", "code revision", "config digest", "backend",
               "started", "ended", "error", "folder"]
    cols = ["pattern", "config", "rep", "status", "seed", "code_revision", "config_digest", "backend",
            "started_at", "ended_at", "error", "run_dir"]
    root = str(catalog.root.resolve())
    rows = []
    for r in frame[cols].itertuples(index=False):
        values = [str(v) for v in r]
        values[-1] = values[-1][len(root) + 1:] if values[-1].startswith(root + "/") else values[-1]
        rows.append(values)
    return Table("Runs and their manifests", headers, rows)


def damaged_table(catalog: RunCatalog) -> Table:
    """Run folders the report could not read, and why: left out of every table and figure."""
    root = str(catalog.root.resolve())
    rows = [[bad.name, bad.run_dir.as_posix().removeprefix(root + "/"), bad.reason] for bad in catalog.damaged]
    return Table("Damaged runs (left out of the report)", ["run", "folder", "reason"], rows)


def build_document(catalog: RunCatalog, summary: pd.DataFrame, comparison: pd.DataFrame, claims: pd.DataFrame,
                   figures: Dict[str, Path], spark_master: str, table_files: Sequence[Path],
                   extra_sections: Sequence[Section] = (), skip_patterns: Sequence[str] = ()) -> Document:
    """The report. `extra_sections` follow the claims (the fidelity section, the evaluations' own,
    reporting.evaluations); patterns in `skip_patterns` get no platform compliance/cost section
    (an evaluation's sections replace it)."""
    sections: List[Section] = [Section("The paper's claims", [claims_table(claims)])]
    sections.extend(extra_sections)  # e.g. the fidelity section after the claims it explains
    for pattern in sorted(summary["pattern"].unique()):
        if pattern not in skip_patterns:
            sections.append(_pattern_section(pattern, summary, comparison, figures))
    across: List[Block] = [Figure(caption, figures[key]) for key, caption in (
        ("arrival_patterns", "Arrival patterns (the paper's Fig. 7), from the runs' load tables"),
        ("compliance_vs_paper", "Compliance against the paper"),
        ("cost_vs_paper", "Cost against the paper")) if key in figures]
    if across:
        sections.append(Section("Across patterns", across))
    sections.append(_runs_section(catalog))
    return Document(f"Experiment report: {catalog.root.resolve().name}", _intro(catalog, spark_master, table_files),
                    sections)


def _intro(catalog: RunCatalog, spark_master: str, table_files: Sequence[Path]) -> List[str]:
    complete, incomplete = catalog.complete, catalog.incomplete
    revisions = sorted({r.manifest.code_revision for r in complete})
    configs = sorted({(r.pattern, r.config) for r in complete})
    return [
        f"Runs folder: {catalog.root.resolve()} — generated {datetime.now(timezone.utc).isoformat(timespec='seconds')} "
        f"with Spark ({spark_master}).",
        f"{len(complete)} complete run(s) in {len(configs)} configuration(s) of {len({p for p, _ in configs})} "
        f"pattern(s); {len(incomplete)} incomplete run(s)"
        + (" — reported below and excluded from every mean." if incomplete else ".")
        + (f" {len(catalog.damaged)} damaged run folder(s) left out (see Runs)." if catalog.damaged else ""),
        "Code revision(s): " + ", ".join(revisions) + ".",
        # the numbers depend on the simulator's profile (paper values, calibrated unknowns, ...): say which
        "Evaluation(s) and profile(s): " + ", ".join(sorted(
            {f"{r.manifest.experiment} on profile {r.manifest.resolved_config.get('profile', '?')}" for r in complete}))
        + ".",
        "Tables: " + ", ".join(p.name for p in table_files) + " (folder tables/).",
    ]


def _pattern_section(pattern: str, summary: pd.DataFrame, comparison: pd.DataFrame,
                     figures: Dict[str, Path]) -> Section:
    own = summary[summary["pattern"] == pattern]
    blocks: List[Block] = [
        measured_table(own, _MAIN_COLUMNS,
                       "Compliance (without O2/O6 unless noted) and cost, mean ± sd over repetitions"),
        comparison_table(comparison, pattern),
        measured_table(own, _ACTION_COLUMNS, "Actions and adaptation, mean ± sd"),
        measured_table(own, _ELASTICITY_COLUMNS,
                       "Elasticity (SPEC RG metrics, mean over operators; demand = instances for the measured "
                       "input rate)"),
        per_operator_table(own, "realtime"),
    ]
    for key, caption in ((f"timeseries_{pattern}", "Data volume, operator instances and leased VMs over time"),
                         (f"durations_{pattern}", "Per-operator duration distributions")):
        if key in figures:
            blocks.append(Figure(caption, figures[key]))
    return Section(f"Pattern {pattern}", blocks)


def _runs_section(catalog: RunCatalog) -> Section:
    """Incomplete and damaged runs first, every run, then each resolved config once."""
    complete, incomplete = catalog.complete, catalog.incomplete
    run_blocks: List[Block] = [runs_table(catalog)]
    if incomplete:
        run_blocks.insert(0, Table("Incomplete runs (excluded from the means)", ["run", "status", "error"],
                                   [[f"{r.pattern}/{r.config}/{r.rep}", r.manifest.status, r.manifest.error or ""]
                                    for r in sorted(incomplete, key=lambda r: (r.pattern, r.config, r.rep))]))
    else:
        run_blocks.insert(0, "No incomplete runs.")
    if catalog.damaged:
        run_blocks.insert(0, damaged_table(catalog))
    digests: Dict[str, dict] = {}
    for r in complete:
        digests.setdefault(r.config_digest, r.manifest.resolved_config)
    for digest, cfg in sorted(digests.items()):
        users = sorted(f"{r.pattern}/{r.config}" for r in complete if r.config_digest == digest)
        run_blocks.append(Preformatted(f"resolved config {digest} ({', '.join(sorted(set(users)))})",
                                       json.dumps(cfg, indent=1, sort_keys=True)))
    return Section("Runs", run_blocks)
