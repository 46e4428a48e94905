"""The event log of one run: the only module that knows its schema (described in docs/event-log.md).

A run folder holds `manifest.json` and one Parquet file per table. Times are float64 seconds since
the run's start. Reports read run folders only through this module, so a schema change happens
here and bumps SCHEMA_VERSION.

Determinism: the same data always gives byte-identical Parquet files (fixed compression, no
timestamps, no pandas metadata). The manifest's wall-clock times are the only part of a run that
differs between two identical runs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 3  # 2: edges, instance_stats, dropped, latency; pool and restart actions; manifest billing
# 3: placements (both backends), host_traffic (simulator); older runs lack them, readers ask for them by name

MANIFEST_FILE = "manifest.json"
ACTIONS = ("lease", "prolong", "release", "scale_up", "scale_down", "migrate", "replace", "activate", "deactivate",
           "restart")
STATUSES = ("running", "complete", "incomplete")
BILLING_MODES = ("own", "rebill")
def billing_mode(manifest: "Manifest") -> str:
    """The manifest's billing mode; runs older than the field: the BTU policy billed itself."""
    return manifest.billing or ("own" if manifest.policy == "btu" else "rebill")

PROJECT_DIR = Path(__file__).resolve().parent.parent


def _field(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


_F64, _I32, _I64, _STR = pa.float64(), pa.int32(), pa.int64(), pa.string()

TABLES: Dict[str, pa.Schema] = {
    "load": pa.schema([
        _field("t_s", _F64), _field("machines", _I32), _field("source", _STR),
        _field("items", _I64), _field("lateness_ms", _F64),
    ]),
    "samples": pa.schema([
        _field("t_s", _F64), _field("operator", _STR), _field("instance", _STR),
        _field("duration_ms", _F64),
    ]),
    # items processed during the monitoring interval ending at t_s
    "processed": pa.schema([_field("t_s", _F64), _field("operator", _STR), _field("items", _I64)]),
    "queues": pa.schema([_field("t_s", _F64), _field("operator", _STR), _field("depth", _I64)]),
    # instances = running, starting = not yet running, hosts = hosts the operator runs on
    "instances": pa.schema([
        _field("t_s", _F64), _field("operator", _STR), _field("instances", _I32),
        _field("starting", _I32), _field("hosts", _I32),
    ]),
    # leased VMs per monitoring interval; ready = leased and booted
    "hosts": pa.schema([_field("t_s", _F64), _field("leased", _I32), _field("ready", _I32)]),
    # operator/instance/host/target_host only apply to some actions (target_host: migrate)
    "actions": pa.schema([
        _field("t_s", _F64), _field("action", _STR),
        _field("operator", _STR, nullable=True), _field("instance", _STR, nullable=True),
        _field("host", _STR, nullable=True), _field("target_host", _STR, nullable=True),
        _field("reason", _STR), _field("policy", _STR),
    ]),
    # schema 2 -- per monitoring interval ending at t_s: items sent along each edge of the topology
    # (source = a source or the upstream operator)
    "edges": pa.schema([
        _field("t_s", _F64), _field("source", _STR), _field("target", _STR), _field("items", _I64),
    ]),
    # per instance serving at the interval's end or having served in it: items it processed and its
    # busy fraction of the interval per item slot
    "instance_stats": pa.schema([
        _field("t_s", _F64), _field("operator", _STR), _field("instance", _STR), _field("processed", _I64),
        _field("utilisation", _F64),
    ]),
    # live runs only (optional: older runs lack it): the instance_stats rows' busy wall time and CPU time
    # in ms, summed over the instance's worker slots; cpu_ms = the worker threads' CPU clocks and the
    # processes they ran (no wait for a CPU), run_delay_ms = the same tasks' wait for a CPU inside busy
    # periods (busy_ms - run_delay_ms: the service time without CPU contention), container_cpu_ms = the
    # container's cgroup CPU (overhead threads included); null where the instance did not report it
    "instance_cpu": pa.schema([
        _field("t_s", _F64), _field("operator", _STR), _field("instance", _STR), _field("busy_ms", _F64),
        _field("cpu_ms", _F64, nullable=True), _field("run_delay_ms", _F64, nullable=True),
        _field("container_cpu_ms", _F64, nullable=True),
    ]),
    # items dropped during the interval, with the reason (purge: a restart emptied the queues)
    "dropped": pa.schema([
        _field("t_s", _F64), _field("operator", _STR), _field("reason", _STR), _field("items", _I64),
    ]),
    # end-to-end latency of sampled items: from the source's emission to the end of processing at a sink
    "latency": pa.schema([_field("t_s", _F64), _field("operator", _STR), _field("latency_ms", _F64)]),
    # schema 3 -- every placement decision: a scale-up (instance = the new one) or a migration (instance =
    # the one moved, host = its target), with the solver run behind it (ODP; null for other strategies)
    "placements": pa.schema([
        _field("t_s", _F64), _field("action", _STR), _field("operator", _STR), _field("instance", _STR),
        _field("host", _STR), _field("reason", _STR), _field("solve", _I64, nullable=True),
        _field("solver_status", _STR, nullable=True), _field("objective", _F64, nullable=True),
        _field("gap", _F64, nullable=True), _field("solve_s", _F64, nullable=True),
        _field("solve_cpu_s", _F64, nullable=True),
    ]),
    # schema 3 -- emulated network only: hops between two hosts per monitoring interval ending at t_s,
    # with the mean delay drawn for them
    "host_traffic": pa.schema([
        _field("t_s", _F64), _field("source_host", _STR), _field("target_host", _STR), _field("items", _I64),
        _field("delay_ms", _F64),
    ]),
    # job mode and Daedalus (docs/papers/daedalus.md; optional: only runs that have them write them)
    # per controller loop: the forecast used (arima | linear), the WAPE of the previous ARIMA forecast,
    # the maximum over the horizon, the forecasting mode
    "forecasts": pa.schema([
        _field("t_s", _F64), _field("controller", _STR), _field("model", _STR), _field("wape", _F64),
        _field("horizon_max", _F64), _field("mode", _STR),
    ]),
    # per loop and scale-out: the estimated and observed capacity (items/s; 0 = none yet)
    "capacity": pa.schema([
        _field("t_s", _F64), _field("controller", _STR), _field("scaleout", _I32), _field("estimated", _I64),
        _field("observed", _I64),
    ]),
    # per rescale of a controller: predicted and anomaly-observed recovery time, the downtime it assumed
    "recovery": pa.schema([
        _field("t_s", _F64), _field("controller", _STR), _field("scaleout", _I32), _field("predicted_s", _F64),
        _field("observed_s", _F64), _field("downtime_s", _F64),
    ]),
    # per stop-the-world rescale of the job simulator: true downtime, items replayed, lag before, time
    # until the lag is back (NaN: not within the run), true capacity before and after
    "rescales": pa.schema([
        _field("t_s", _F64), _field("from_n", _I32), _field("to_n", _I32), _field("downtime_s", _F64),
        _field("replayed", _I64), _field("lag_before", _F64), _field("recovered_s", _F64),
        _field("capacity_before", _F64), _field("capacity_after", _F64),
    ]),
    # one row per lease; released=False: still leased at the run's end (end_s = run end)
    "leases": pa.schema([
        _field("host", _STR), _field("start_s", _F64), _field("end_s", _F64),
        _field("btu_s", _F64), _field("paid_btus", _I64), _field("prolongations", _I64),
        _field("released", pa.bool_()),
    ]),
}


# nullable columns added to a table after files were written without them: read as nulls there
ADDED_COLUMNS: Dict[str, Tuple[str, ...]] = {"instance_cpu": ("run_delay_ms",)}


class EventLogError(Exception):
    """A missing, malformed or schema-violating event-log file; the message names the file/table."""


Column = Union[Sequence[Any], np.ndarray, pd.Series]


def _to_array(table: str, fld: pa.Field, values: Column) -> pa.Array:
    # Strings use pandas null semantics (None/NaN -> null); numbers must keep NaN as a value.
    from_pandas = pa.types.is_string(fld.type)
    try:
        arr = pa.array(values, from_pandas=from_pandas)
        # safe cast: refuses 1.5 -> int and int overflow instead of silently corrupting data
        return arr.cast(fld.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise EventLogError(f"table {table!r}, column {fld.name!r}: cannot store as {fld.type}: {exc}") from exc


def _to_table(table: str, columns: Mapping[str, Column]) -> pa.Table:
    schema = TABLES[table]
    expected, given = set(schema.names), set(columns)
    if expected != given:
        missing, extra = sorted(expected - given), sorted(given - expected)
        raise EventLogError(
            f"table {table!r}: columns do not match schema v{SCHEMA_VERSION} "
            f"(missing: {missing or 'none'}, extra: {extra or 'none'})"
        )
    arrays = [_to_array(table, fld, columns[fld.name]) for fld in schema]
    lengths = {fld.name: len(a) for fld, a in zip(schema, arrays, strict=True)}
    if len(set(lengths.values())) > 1:
        raise EventLogError(f"table {table!r}: columns differ in length: {lengths}")
    for fld, arr in zip(schema, arrays, strict=True):
        if not fld.nullable and arr.null_count:
            raise EventLogError(f"table {table!r}, column {fld.name!r}: {arr.null_count} missing value(s)")
    if table == "actions":
        unknown = sorted(set(arrays[schema.get_field_index("action")].to_pylist()) - set(ACTIONS))
        if unknown:
            raise EventLogError(f"table 'actions': unknown action(s) {unknown}; known: {list(ACTIONS)}")
    meta = {"schema_version": str(SCHEMA_VERSION), "table": table}
    return pa.Table.from_arrays(arrays, schema=schema.with_metadata(meta))


def _process_umask() -> int:
    """The umask, read once at import (os.umask can only be read by setting it, which would race
    with threads started later)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_process_umask()  # as open() would create them: shared run folders stay readable


def _replace_atomically(path: Path, write: Any) -> None:
    """Write via a temp file in the same folder and os.replace: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)  # mkstemp makes it 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _with_added_columns(table: str, data: pa.Table) -> pa.Table:
    """A file written before ADDED_COLUMNS[table] existed, with those columns as nulls in schema order."""
    schema = TABLES[table]
    columns = [data.column(f.name) if f.name in data.schema.names else pa.nulls(data.num_rows, f.type)
               for f in schema]
    return pa.Table.from_arrays(columns, names=schema.names)


class EventLog:
    """The tables of one run folder."""

    def __init__(self, run_dir: Union[str, Path]):
        self.run_dir = Path(run_dir)

    def path(self, table: str) -> Path:
        if table not in TABLES:
            raise EventLogError(f"unknown table {table!r}; known: {sorted(TABLES)}")
        return self.run_dir / f"{table}.parquet"

    def has(self, table: str) -> bool:
        return self.path(table).is_file()

    def write(self, table: str, columns: Mapping[str, Column]) -> Path:
        path = self.path(table)
        data = _to_table(table, columns)
        _replace_atomically(path, lambda tmp: pq.write_table(
            data, tmp, compression="zstd", compression_level=3, version="2.6",
            use_dictionary=True, write_statistics=True, store_schema=True,
        ))
        return path

    def read(self, table: str) -> pd.DataFrame:
        path = self.path(table)
        if not path.is_file():
            raise EventLogError(f"event-log table {table!r} not found: {path}")
        try:
            data = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise EventLogError(f"cannot read event-log table {path}: {exc}") from exc
        expected = TABLES[table].names
        older = [n for n in expected if n not in ADDED_COLUMNS.get(table, ())]
        if data.schema.names == older and older != expected:
            data = _with_added_columns(table, data)
        if data.schema.names != expected:
            raise EventLogError(f"{path}: columns {data.schema.names} differ from schema v{SCHEMA_VERSION} {expected}")
        return data.cast(TABLES[table]).to_pandas()


# ---- manifest ---------------------------------------------------------------------------------

def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Manifest:
    run_id: str
    experiment: str
    pattern: str
    config: str  # e.g. "btu-10", "threshold"
    policy: str
    btu_minutes: int
    rep: int
    seed: int
    seeds: Dict[str, int]  # named RNG streams
    backend: str
    resolved_config: Dict[str, Any]
    code_revision: str
    versions: Dict[str, str]
    schema_version: int = SCHEMA_VERSION
    started_at: str = field(default_factory=utc_now)
    ended_at: Optional[str] = None
    status: str = "running"
    error: Optional[str] = None
    sim_duration_s: float = 0.0
    # how reporting bills the run: "own" = by the BTU length it ran with (btu_minutes); "rebill" = under
    # each of billing.rebill_minutes (BTU-agnostic approaches). Empty in runs written before it existed.
    billing: str = ""
    # digest of the experiment's settings apart from which configurations and repetitions ran: runs
    # of one workload folder are compared (and averaged) only if it is the same
    settings_digest: str = ""
    details: Dict[str, Any] = field(default_factory=dict)  # backend facts, e.g. live image digests, accounting


def write_manifest(run_dir: Union[str, Path], manifest: Manifest) -> Path:
    if manifest.status not in STATUSES:
        raise EventLogError(f"manifest status must be one of {list(STATUSES)}, got {manifest.status!r}")
    path = Path(run_dir) / MANIFEST_FILE
    text = json.dumps(dataclasses.asdict(manifest), sort_keys=True, indent=2) + "\n"
    _replace_atomically(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path


def read_manifest(run_dir: Union[str, Path]) -> Manifest:
    path = Path(run_dir) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EventLogError(f"manifest not found: {path}") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EventLogError(f"corrupt manifest {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EventLogError(f"corrupt manifest {path}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(Manifest)}
    required = {f.name for f in dataclasses.fields(Manifest)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing, extra = sorted(required - set(data)), sorted(set(data) - names)
    if missing or extra:
        raise EventLogError(f"corrupt manifest {path}: missing keys {missing or 'none'}, unknown keys "
                            f"{extra or 'none'}")
    manifest = Manifest(**data)
    if manifest.status not in STATUSES:
        raise EventLogError(f"corrupt manifest {path}: status {manifest.status!r} not in {list(STATUSES)}")
    if manifest.schema_version > SCHEMA_VERSION:
        raise EventLogError(f"{path}: schema version {manifest.schema_version} is newer than this code's "
                            f"{SCHEMA_VERSION}")
    return manifest


def finish_manifest(run_dir: Union[str, Path], status: str, error: Optional[str] = None,
                    sim_duration_s: Optional[float] = None, details: Optional[Dict[str, Any]] = None) -> Manifest:
    """Mark a run complete or incomplete (with the error that stopped it) and stamp ended_at."""
    if status not in ("complete", "incomplete"):
        raise EventLogError(f"a finished run is 'complete' or 'incomplete', got {status!r}")
    manifest = read_manifest(run_dir)
    manifest.status, manifest.error, manifest.ended_at = status, error, utc_now()
    if sim_duration_s is not None:
        manifest.sim_duration_s = float(sim_duration_s)
    if details:
        manifest.details = {**manifest.details, **details}
    write_manifest(run_dir, manifest)
    return manifest


def git_output(args: Sequence[str], cwd: Path) -> Optional[str]:
    """`git ARGS`'s standard output in cwd; None without git, outside a checkout or when it fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def code_revision(project_dir: Union[str, Path, None] = None) -> str:
    """`git rev-parse HEAD` (+ "-dirty" with uncommitted changes), "unknown" without git. Never raises."""
    cwd = Path(project_dir) if project_dir is not None else PROJECT_DIR
    head = git_output(["rev-parse", "HEAD"], cwd)
    if not head or not head.strip():
        return "unknown"
    # --no-optional-locks: status must not take index.lock while someone else commits
    status = git_output(["--no-optional-locks", "status", "--porcelain"], cwd)
    # a failed status counts as dirty: claiming a clean tree we could not check would mislead
    return head.strip() + ("-dirty" if status is None or status.strip() else "")


def package_versions() -> Dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("numpy", "pandas", "pyarrow", "hydra-core", "omegaconf", "pyspark", "pika", "kafka-python"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


# ---- run folders ------------------------------------------------------------------------------

def run_dir_for(out: Union[str, Path], pattern: str, config: str, rep: int) -> Path:
    return Path(out) / pattern / config / str(rep)


def find_runs(root: Union[str, Path]) -> list[Path]:
    """Run folders (those holding a manifest) below root, sorted; hidden folders (a sweep's
    staging area) are not looked into."""
    root = Path(root)
    return sorted(p.parent for p in root.rglob(MANIFEST_FILE)
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts[:-1]))
