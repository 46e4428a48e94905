"""The runs a report covers: run folders found below RUNS_DIR, their manifests, and the per-run
parameters the Spark stage needs (SLOs and service capacity per operator), read from each
manifest's resolved config the same way reporting.summary reads them. Every event-log table the
report reads is checked against its schema with pyarrow (the files' footers only) before Spark
reads it, so that a bad file fails with its name instead of deep inside a Spark job.

Only complete runs enter the metrics; the others are listed with their status and error.
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

from reporting.summary import Billing, SummaryError, billing_of, config_value
from testbed.eventlog import TABLES, EventLogError, Manifest, find_runs, read_manifest

PathLike = Union[str, Path]

# The event-log tables a report reads (a run's other tables are not its business).
REPORT_TABLES = ("samples", "processed", "queues", "instances", "hosts", "load", "actions", "leases")


class ReportError(ValueError):
    """Runs that cannot be reported; the message names the folder, file or config key."""


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
class RunCatalog:
    root: Path
    complete: Tuple[RunInfo, ...]
    incomplete: Tuple[RunInfo, ...]  # status running or incomplete: reported, never averaged

    def table_paths(self, table: str) -> List[str]:
        return [str(run.run_dir / f"{table}.parquet") for run in self.complete]

    def runs_frame(self) -> pd.DataFrame:
        """One row per run found (complete or not) with what its manifest says."""
        rows = []
        for run in sorted([*self.complete, *self.incomplete], key=lambda r: (r.pattern, r.config, r.rep, str(r.run_dir))):
            m = run.manifest
            rows.append({
                "pattern": m.pattern, "config": m.config, "rep": m.rep, "status": m.status,
                "policy": m.policy, "btu_minutes": m.btu_minutes, "seed": m.seed, "backend": m.backend,
                "code_revision": m.code_revision, "config_digest": run.config_digest,
                "started_at": m.started_at, "ended_at": m.ended_at or "", "error": m.error or "",
                "run_dir": str(run.run_dir),
            })
        return pd.DataFrame(rows)


def _check_config(run: RunInfo) -> None:
    """The config values the metrics need, read once here so that a missing one fails before Spark."""
    try:
        run.operators()
        run.billing
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
    """The run folders below runs_dir; ReportError when there is no such folder or no run in it."""
    root = Path(runs_dir)
    if not root.exists():
        raise ReportError(f"runs folder not found: {root}")
    if not root.is_dir():
        raise ReportError(f"runs folder is not a folder: {root}")
    dirs = find_runs(root)
    if not dirs:
        raise ReportError(f"no runs (folders with manifest.json) below {root}")
    return dirs


def load_catalog(runs_dir: PathLike, dirs: Optional[Sequence[Path]] = None) -> RunCatalog:
    """All runs below runs_dir (dirs: run_folders(runs_dir), when already known). Raises ReportError
    naming the folder or file when there is nothing to report: no such folder, no run folders, a
    corrupt manifest, only incomplete runs, runs of several experiments, a configuration run twice
    under the same (pattern, config, rep), a config value the metrics need, or an event-log table
    that is missing, unreadable or not of its schema."""
    root = Path(runs_dir)
    runs: List[RunInfo] = []
    for d in run_folders(root) if dirs is None else dirs:
        try:
            manifest = read_manifest(d)
        except EventLogError as exc:
            raise ReportError(f"bad run folder in {root}: {exc}") from exc
        runs.append(RunInfo(-1, d.resolve(), manifest))
    complete_runs = [r for r in runs if r.manifest.status == "complete"]
    incomplete = tuple(r for r in runs if r.manifest.status != "complete")
    if not complete_runs:
        raise ReportError(f"no complete runs below {root}: {len(incomplete)} run(s), none complete "
                          f"({', '.join(str(r.run_dir) for r in incomplete[:5])})")
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
    for run in complete:
        _check_config(run)
        for table in REPORT_TABLES:
            check_table(run.run_dir / f"{table}.parquet", table)
    return RunCatalog(root, complete, incomplete)
