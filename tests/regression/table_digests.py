"""Content digests of a run's event-log tables, to prove a refactor left them untouched.

A digest covers every column's values in order (floats bit for bit, strings, nulls), not the Parquet
file's bytes, so it does not change with the writer's version string; any changed value does. The
solver's wall-clock times are left out (columns `solve_s`, `solve_cpu_s` and the "…, 255 ms;" in a
solve's reason): they differ from run to run while every decision is the same."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Dict, Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

WALL_CLOCK_COLUMNS = ("solve_s", "solve_cpu_s")
_SOLVE_TIME = re.compile(r"(gap [^,;]+), \d+ ms;")


def table_digest(path: Path) -> str:
    table = pq.read_table(path)
    h = hashlib.sha256()
    h.update(repr(table.schema.names).encode())
    table = table.drop_columns([c for c in WALL_CLOCK_COLUMNS if c in table.schema.names])
    for name, column in zip(table.schema.names, table.columns, strict=True):
        h.update(name.encode())
        h.update(str(column.type).encode())
        for chunk in column.chunks:
            h.update(_string_bytes(chunk) if pa.types.is_string(chunk.type) else _numeric_bytes(chunk))
    return h.hexdigest()


def _string_bytes(chunk: pa.Array) -> bytes:
    return "\x1f".join("\x00" if v is None else _SOLVE_TIME.sub(r"\1, _ ms;", v) for v in chunk.to_pylist()).encode()


def _numeric_bytes(chunk: pa.Array) -> bytes:
    values = chunk.to_numpy(zero_copy_only=False)
    return values.tobytes() + bytes(chunk.is_null().to_numpy(zero_copy_only=False))


def run_digests(run_dirs: Iterable[Path], root: Path, tables: Optional[Iterable[str]]) -> Dict[str, str]:
    """{'<run folder relative to root>/<table>': digest} for the given tables (None: all) of every run."""
    out: Dict[str, str] = {}
    for run in sorted(run_dirs):
        names = tables if tables is not None else sorted(p.stem for p in run.glob("*.parquet"))
        for table in names:
            out[f"{run.relative_to(root).as_posix()}/{table}"] = table_digest(run / f"{table}.parquet")
    return out
