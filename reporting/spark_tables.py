"""Event-log tables of all complete runs as Spark DataFrames: one read per table over every run
folder at once, each row tagged with its run (run_id) and its position in its file (_row).

The run of a row comes from the path Spark reads it from, without any work per row: a scratch
folder holds one link per run, `run_id=<id>` -> the run folder, and Spark reads
`<scratch>/run_id=<id>/<table>.parquet` with the scratch folder as the base path, so that run_id
is a partition column, a constant of each file. Nothing depends on the run folders' names or on
how Spark spells paths. On a cluster the scratch folder must be readable by the executors at the
same path, like the runs folder.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional

import pyarrow as pa

from reporting.run_catalog import ReportError, RunCatalog
from testbed.eventlog import TABLES


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


class RunTables:
    """DataFrames of the event-log tables (`tables[name]`), read through a scratch folder of links
    made in `scratch_parent` and removed by `close()` (or at the end of a `with` block)."""

    def __init__(self, spark, catalog: RunCatalog, tables: Iterable[str], scratch_parent: Optional[Path] = None):
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        self._scratch = tempfile.TemporaryDirectory(prefix=".spark-runs-", dir=scratch_parent)
        base = Path(self._scratch.name)
        for run in catalog.complete:
            os.symlink(run.run_dir, base / f"run_id={run.run_id}", target_is_directory=True)
        self._tables = {}
        for table in tables:
            schema = T.StructType([*spark_schema(table).fields, T.StructField("run_id", T.IntegerType(), False)])
            paths = [str(base / f"run_id={run.run_id}" / f"{table}.parquet") for run in catalog.complete]
            df = spark.read.schema(schema).option("basePath", str(base)).parquet(*paths)
            self._tables[table] = df.select("*", F.col("_metadata.row_index").alias("_row"))

    def __getitem__(self, table: str):
        """Table rows with run_id and _row (position in the run's file, for stable time ordering)."""
        return self._tables[table]

    def close(self) -> None:
        self._scratch.cleanup()

    def __enter__(self) -> "RunTables":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
