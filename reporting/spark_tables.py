"""Event-log tables of all complete runs as Spark DataFrames, one read per table over every run
folder at once, each row tagged with its run (run_id) and its position in its file (_row).

The run of a row comes from the file it was read from (`_metadata.file_path`): Spark's spelling of
each run folder is learnt once from a scan of a small table and matched to the catalog's run
folders, so the match never depends on how Spark spells (or URL-encodes) paths; each table then
joins its rows to a tiny broadcast map of its files' paths (no per-row string parsing).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict
from urllib.parse import unquote, urlparse

import pyarrow as pa

from reporting.run_catalog import ReportError, RunCatalog
from testbed.eventlog import TABLES

# The table whose (tiny) scan maps Spark's file paths to runs: one row per monitoring interval.
_KEY_TABLE = "hosts"


def spark_schema(table: str):
    """The Spark schema of an event-log table, derived from testbed.eventlog.TABLES."""
    from pyspark.sql import types as T

    mapping = {pa.float64(): T.DoubleType(), pa.int32(): T.IntegerType(), pa.int64(): T.LongType(),
               pa.string(): T.StringType(), pa.bool_(): T.BooleanType()}
    fields = []
    for fld in TABLES[table]:
        if fld.type not in mapping:
            raise ReportError(f"event-log table {table!r}, column {fld.name!r}: no Spark type for {fld.type}")
        fields.append(T.StructField(fld.name, mapping[fld.type], nullable=fld.nullable))
    return T.StructType(fields)


def _local_path(spark_dir: str) -> str:
    """'file:/a/b%20c' or 'file:///a/b c' -> '/a/b c' (other schemes keep their path part)."""
    return unquote(urlparse(spark_dir).path) if "://" in spark_dir or spark_dir.startswith("file:") else spark_dir


class RunTables:
    """Lazy DataFrames of the event-log tables, keyed by table name."""

    def __init__(self, spark, catalog: RunCatalog):
        from pyspark.sql import functions as F

        self._spark, self._catalog, self._F = spark, catalog, F
        self._cache: Dict[str, object] = {}
        self.dir_map = self._dir_map()

    def _raw(self, table: str):
        F = self._F
        df = self._spark.read.schema(spark_schema(table)).parquet(*self._catalog.table_paths(table))
        return df.select("*", F.col("_metadata.file_path").alias("_file"), F.col("_metadata.row_index").alias("_row"))

    def _dir_map(self) -> Dict[str, int]:
        """Spark's spelling of each run folder -> run_id."""
        files = [r["_file"] for r in self._raw(_KEY_TABLE).select("_file").distinct().collect()]
        by_path = {str(Path(run.run_dir)): run.run_id for run in self._catalog.complete}
        found: Dict[str, int] = {}
        for f in files:
            spark_dir = f.rsplit("/", 1)[0]
            run_id = by_path.get(str(Path(_local_path(spark_dir))))
            if run_id is None:
                raise ReportError(f"Spark read {f!r}, which is in none of the run folders below {self._catalog.root}")
            found[spark_dir] = run_id
        missing = set(by_path.values()) - set(found.values())
        if missing:
            # an empty hosts table gives no rows to learn the folder from: the run has no monitoring data
            names = [str(run.run_dir) for run in self._catalog.complete if run.run_id in missing]
            raise ReportError(f"run(s) without rows in table {_KEY_TABLE!r} (no monitoring data): {names}")
        return found

    def __getitem__(self, table: str):
        """Table rows with run_id and _row (position in the run's file, for stable time ordering)."""
        if table not in self._cache:
            from pyspark.sql import types as T

            F = self._F
            files = self._spark.createDataFrame(
                [(f"{d}/{table}.parquet", run_id) for d, run_id in sorted(self.dir_map.items())],
                T.StructType([T.StructField("_file", T.StringType(), False), T.StructField("run_id", T.IntegerType(), False)]))
            self._cache[table] = self._raw(table).join(F.broadcast(files), "_file").drop("_file")
        return self._cache[table]


def materialise(df):
    """Cache a small aggregate and compute it now. Later steps combine several aggregates in one
    plan; without this, Spark would recompute an aggregate (and re-scan its tables) once for every
    branch that uses it. Report.run_report clears the cache at the end."""
    df = df.cache()
    df.count()
    return df
