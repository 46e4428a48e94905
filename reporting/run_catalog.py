"""The runs a report covers: run folders found below RUNS_DIR, their manifests, and the per-run
parameters the metrics need (SLOs, service capacity, billing), read from each manifest's resolved
config the same way reporting.summary reads them.

Only complete runs enter the metrics; the others are listed with their status and error.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pandas as pd

from reporting.summary import SummaryError, config_value, release_window_from_config, billing_btus, is_btu_based
from testbed.billing import price_per_btu
from testbed.eventlog import TABLES, EventLogError, Manifest, find_runs, read_manifest

PathLike = Union[str, Path]


class ReportError(ValueError):
    """Runs that cannot be reported; the message names the folder, file or config key."""


@dataclass(frozen=True)
class OperatorParams:
    operator: str
    slo_ms: float
    excluded: bool  # left out of the headline compliance (O2/O6 in the paper)
    capacity_per_s: float  # items one instance serves per second: parallel / mean service time


@dataclass(frozen=True)
class BillingParams:
    btu_minutes: int  # a BTU length this run is billed under
    price_per_btu: float
    release_window_s: float  # a release leaving more paid time than this unused is early


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
    def approach(self) -> str:
        return self.manifest.policy

    @property
    def btu_based(self) -> bool:
        return is_btu_based(self.manifest.policy)

    @property
    def own_btu(self) -> Optional[int]:
        """The BTU a BTU-based run was made with; None for BTU-agnostic runs (re-billed under each)."""
        return int(self.manifest.btu_minutes) if self.btu_based else None

    @property
    def config_digest(self) -> str:
        """Short hash of the resolved config: runs with equal digests ran the same configuration."""
        text = json.dumps(self.manifest.resolved_config, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def operators(self) -> List[OperatorParams]:
        cfg = self.manifest.resolved_config
        ops = config_value(cfg, "topology.operators", self.run_dir)
        excluded = set(config_value(cfg, "topology.compliance_excluded", self.run_dir))
        out = []
        for op in sorted(ops):
            slo = float(config_value(cfg, f"topology.operators.{op}.slo_ms", self.run_dir))
            # hand-built or older logs may lack the service model: no capacity, no elasticity metrics
            mean_ms = float(config_value(cfg, f"topology.operators.{op}.service.mean_ms", self.run_dir, 0.0))
            parallel = float(config_value(cfg, f"topology.operators.{op}.service.parallel", self.run_dir, 1))
            capacity = parallel / (mean_ms / 1000.0) if mean_ms > 0 else float("nan")
            out.append(OperatorParams(op, slo, op in excluded, capacity))
        return out

    def billing(self) -> List[BillingParams]:
        cfg = self.manifest.resolved_config
        price_10 = float(config_value(cfg, "billing.price_per_10_minutes", self.run_dir))
        return [BillingParams(m, price_per_btu(m, price_10), release_window_from_config(cfg, m * 60.0, self.run_dir))
                for m in billing_btus(self.manifest, self.run_dir)]

    def penalty_per_item(self) -> float:
        return float(config_value(self.manifest.resolved_config, "billing.penalty_per_item", self.run_dir))


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


def _check_complete_run(run: RunInfo) -> None:
    for table in TABLES:
        path = run.run_dir / f"{table}.parquet"
        if not path.is_file():
            raise ReportError(f"run marked complete but event-log table {table!r} is missing: {path}")
    try:
        run.operators()
        run.billing()
        run.penalty_per_item()
    except SummaryError as exc:
        raise ReportError(str(exc)) from exc


def load_catalog(runs_dir: PathLike) -> RunCatalog:
    """All runs below runs_dir. Raises ReportError naming the folder or file when there is nothing
    to report: no such folder, no run folders, a corrupt manifest, only incomplete runs, runs of
    several experiments, or a configuration run twice under the same (pattern, config, rep)."""
    root = Path(runs_dir)
    if not root.exists():
        raise ReportError(f"runs folder not found: {root}")
    if not root.is_dir():
        raise ReportError(f"runs folder is not a folder: {root}")
    dirs = find_runs(root)
    if not dirs:
        raise ReportError(f"no runs (folders with manifest.json) below {root}")
    runs: List[RunInfo] = []
    for d in dirs:
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
        _check_complete_run(run)
    return RunCatalog(root, complete, incomplete)
