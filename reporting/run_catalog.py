"""The runs a report covers: run folders found below RUNS_DIR, their manifests, and the per-run
parameters the Spark stage needs (SLOs and service capacity per operator), read from each
manifest's resolved config the same way reporting.metrics reads them. Every event-log table the
report reads is checked against its schema with pyarrow (the files' footers only) before Spark
reads it, so that a bad file fails with its name instead of deep inside a Spark job.

Only complete runs enter the metrics; the others are listed with their status and error. A run
folder that cannot be read (a corrupt manifest, a missing or unreadable table, a config value the
metrics need) is *damaged*: it is left out with the reason, and the other runs are reported.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from reporting.metrics import Billing, SummaryError, billing_of, config_value
from testbed.eventlog import TABLES, EventLogError, Manifest, find_runs, read_manifest

PathLike = Union[str, Path]

# Exit statuses of `testbed report` and `testbed summary` (README.md, "Reports"): a report with
# damaged runs left out is still written, but a script must be able to tell it from one of every run.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_DAMAGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# The event-log tables a report reads (a run's other tables are not its business).
REPORT_TABLES = ("samples", "processed", "queues", "instances", "hosts", "load", "actions", "leases")


class ReportError(ValueError):
    """Runs that cannot be reported; the message names the folder, file or config key."""


class ReportInputError(ReportError):
    """A bad argument (no such runs folder, no runs in it, an output folder that cannot be written):
    the command's exit status 2, as for a bad key."""


@dataclass(frozen=True)
class OperatorParams:
    operator: str
    slo_ms: float
    capacity_per_s: float  # items one instance serves per second: parallel / mean service time


@dataclass(frozen=True)
class RunInfo:
    run_id: int  # position in the catalog; the key joining Spark rows to their run
    run_dir: Path
    manifest: Manifest

    @property
    def pattern(self) -> str:
        return self.manifest.pattern

    @property
    def config(self) -> str:
        return self.manifest.config

    @property
    def rep(self) -> int:
        return int(self.manifest.rep)

    @property
    def billing(self) -> Billing:
        return billing_of(self.manifest, self.run_dir)

    @property
    def config_digest(self) -> str:
        """Short hash of the resolved config: runs with equal digests ran the same configuration."""
        text = json.dumps(self.manifest.resolved_config, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def operators(self) -> List[OperatorParams]:
        cfg = self.manifest.resolved_config
        ops = config_value(cfg, "topology.operators", self.run_dir)
        out = []
        for op in sorted(ops):
            slo = float(config_value(cfg, f"topology.operators.{op}.slo_ms", self.run_dir))
            # hand-built or older logs may lack the service model: no capacity, no elasticity metrics
            mean_ms = float(config_value(cfg, f"topology.operators.{op}.service.mean_ms", self.run_dir, 0.0))
            parallel = float(config_value(cfg, f"topology.operators.{op}.service.parallel", self.run_dir, 1))
            capacity = parallel / (mean_ms / 1000.0) if mean_ms > 0 else float("nan")
            out.append(OperatorParams(op, slo, capacity))
        return out


@dataclass(frozen=True)
class DamagedRun:
    """A run folder left out of the report, and why (the file or key at fault)."""

    run_dir: Path
    reason: str
    manifest: Optional[Manifest] = None  # None when the manifest itself is unreadable

    @property
    def name(self) -> str:
        m = self.manifest
        return f"{m.pattern}/{m.config}/{m.rep}" if m is not None else self.run_dir.name


@dataclass(frozen=True)
class RunCatalog:
    root: Path
    complete: Tuple[RunInfo, ...]
    incomplete: Tuple[RunInfo, ...]  # status running or incomplete: reported, never averaged
    damaged: Tuple[DamagedRun, ...] = ()  # unreadable: listed with the reason, never read further

    def table_paths(self, table: str) -> List[str]:
        return [str(run.run_dir / f"{table}.parquet") for run in self.complete]

    def runs_frame(self) -> pd.DataFrame:
        """One row per run found (complete or not) with what its manifest says."""
        rows = []
        for run in sorted([*self.complete, *self.incomplete],
                          key=lambda r: (r.pattern, r.config, r.rep, str(r.run_dir))):
            m = run.manifest
            rows.append({
                "pattern": m.pattern, "config": m.config, "rep": m.rep, "status": m.status,
                "policy": m.policy, "btu_minutes": m.btu_minutes, "seed": m.seed, "backend": m.backend,
                "code_revision": m.code_revision, "config_digest": run.config_digest,
                "started_at": m.started_at, "ended_at": m.ended_at or "", "error": m.error or "",
                "run_dir": str(run.run_dir),
            })
        for bad in self.damaged:
            bm = bad.manifest
            row: Dict[str, object] = {key: "" for key in rows[0]} if rows else {}
            row.update({"pattern": bm.pattern if bm else "", "config": bm.config if bm else "",
                        "rep": bm.rep if bm else "",
                        "status": "damaged", "error": bad.reason, "run_dir": str(bad.run_dir)})
            rows.append(row)
        return pd.DataFrame(rows)


def _check_config(run: RunInfo) -> None:
    """The config values the metrics need, read once here so that a missing one fails before Spark."""
    try:
        run.operators()
        _ = run.billing  # the property reads the billing settings (fails here if missing)
        config_value(run.manifest.resolved_config, "billing.penalty_per_item", run.run_dir)
        config_value(run.manifest.resolved_config, "billing.price_per_10_minutes", run.run_dir)
    except SummaryError as exc:
        raise ReportError(str(exc)) from exc


def check_table(path: Path, table: str) -> None:
    """The file exists, its footer is readable and its columns are the schema's, in name and type."""
    if not path.is_file():
        raise ReportError(f"run marked complete but event-log table {table!r} is missing: {path}")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise ReportError(f"cannot read event-log table {path}: {exc}") from exc
    expected = TABLES[table]
    found = [(f.name, f.type) for f in schema]
    if found != [(f.name, f.type) for f in expected]:
        raise ReportError(f"{path}: columns {', '.join(f'{n} {t}' for n, t in found)} are not those of table "
                          f"{table!r}: {', '.join(f'{f.name} {f.type}' for f in expected)}")


def run_folders(runs_dir: PathLike) -> List[Path]:
    """The run folders below runs_dir; ReportInputError when there is no such folder or no run in it."""
    root = Path(runs_dir)
    if not root.exists():
        raise ReportInputError(f"runs folder not found: {root}")
    if not root.is_dir():
        raise ReportInputError(f"runs folder is not a folder: {root}")
    dirs = find_runs(root)
    if not dirs:
        raise ReportInputError(f"no runs (folders with manifest.json) below {root}")
    return dirs


def _problem(run: RunInfo) -> Optional[str]:
    """Why a complete run cannot be reported (a config value, a table the report or its evaluation's
    metrics read), None if it can."""
    from reporting.evaluations import report_for

    try:
        _check_config(run)
        for table in dict.fromkeys((*REPORT_TABLES, *report_for(run.manifest.experiment).tables)):
            check_table(run.run_dir / f"{table}.parquet", table)
    except ReportError as exc:
        return str(exc)
    return None


def _read_runs(dirs: Sequence[Path]) -> Tuple[List[RunInfo], List[DamagedRun]]:
    """Every run folder's manifest; folders whose manifest cannot be read are damaged."""
    runs: List[RunInfo] = []
    damaged: List[DamagedRun] = []
    for d in dirs:
        try:
            runs.append(RunInfo(-1, d.resolve(), read_manifest(d)))
        except EventLogError as exc:
            damaged.append(DamagedRun(d.resolve(), str(exc)))
    return runs, damaged


def load_catalog(runs_dir: PathLike, dirs: Optional[Sequence[Path]] = None) -> RunCatalog:
    """All runs below runs_dir (dirs: run_folders(runs_dir), when already known). A run folder with
    a corrupt manifest, a config value the metrics need missing, or an event-log table that is
    missing, unreadable or not of its schema is damaged: left out, with the reason, in
    `catalog.damaged`. Raises ReportInputError when there is no such folder, no run folder, or every
    complete run is damaged, and ReportError naming the folder or file when nothing can be reported
    otherwise: no complete run, runs of several experiments, or a configuration run twice under the
    same (pattern, config, rep)."""
    root = Path(runs_dir)
    runs, damaged = _read_runs(run_folders(root) if dirs is None else dirs)
    incomplete = tuple(r for r in runs if r.manifest.status != "complete")
    complete_runs = []
    for run in (r for r in runs if r.manifest.status == "complete"):
        problem = _problem(run)
        if problem is None:
            complete_runs.append(run)
        else:
            damaged.append(DamagedRun(run.run_dir, problem, run.manifest))
    if not complete_runs:  # every complete run damaged: the folder is bad input, naming the first fault
        error = ReportInputError if damaged else ReportError
        raise error(_nothing_to_report(root, incomplete, damaged))
    experiments = sorted({r.manifest.experiment for r in complete_runs})
    if len(experiments) > 1:
        raise ReportError(f"{root}: runs of several experiments {experiments}; report one experiment folder")
    seen: Dict[Tuple[str, str, int], Path] = {}
    for r in complete_runs:
        key = (r.pattern, r.config, r.rep)
        if key in seen:
            raise ReportError(f"{root}: two runs of {key[0]}/{key[1]} repetition {key[2]}: {seen[key]} and {r.run_dir}")
        seen[key] = r.run_dir
    ordered = sorted(complete_runs, key=lambda r: (r.pattern, r.config, r.rep))
    complete = tuple(RunInfo(i, r.run_dir, r.manifest) for i, r in enumerate(ordered))
    return RunCatalog(root, complete, incomplete, tuple(sorted(damaged, key=lambda d: str(d.run_dir))))


def _nothing_to_report(root: Path, incomplete: Sequence[RunInfo], damaged: Sequence[DamagedRun]) -> str:
    """The one line saying why no run can be reported: how many are incomplete, which are damaged."""
    first = damaged[0].reason if damaged else ", ".join(str(r.run_dir) for r in incomplete[:5])
    return (f"no complete runs below {root}: {len(incomplete) + len(damaged)} run(s), none complete"
            f"{f' ({len(damaged)} damaged)' if damaged else ''} ({first})")
