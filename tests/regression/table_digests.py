"""Content digests of a run's event-log tables, to prove a refactor left them untouched.

A digest covers every column's values in order (floats bit for bit, strings, nulls), not the Parquet
file's bytes, so it does not change with the writer's version string; any changed value does."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, Iterable

import pyarrow as pa
import pyarrow.parquet as pq


def table_digest(path: Path) -> str:
    table = pq.read_table(path)
    h = hashlib.sha256()
    h.update(repr(table.schema.names).encode())
    for name, column in zip(table.schema.names, table.columns):
        h.update(name.encode())
        h.update(str(column.type).encode())
        for chunk in column.chunks:
            h.update(_string_bytes(chunk) if pa.types.is_string(chunk.type) else _numeric_bytes(chunk))
    return h.hexdigest()


def _string_bytes(chunk: pa.Array) -> bytes:
    return "\x1f".join("\x00" if v is None else v for v in chunk.to_pylist()).encode()


def _numeric_bytes(chunk: pa.Array) -> bytes:
    values = chunk.to_numpy(zero_copy_only=False)
    return values.tobytes() + bytes(chunk.is_null().to_numpy(zero_copy_only=False))


def run_digests(run_dirs: Iterable[Path], root: Path, tables: Iterable[str]) -> Dict[str, str]:
    """{'<run folder relative to root>/<table>': digest} for the given tables of every run."""
    out: Dict[str, str] = {}
    for run in sorted(run_dirs):
        for table in tables:
            out[f"{run.relative_to(root).as_posix()}/{table}"] = table_digest(run / f"{table}.parquet")
    return out
