"""The one Spark session of a report: master and settings from the reporting config, quiet and quick
to start (no UI, few shuffle partitions, JVM logging at ERROR)."""
from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Iterator

from reporting.report_config import SparkConfig

LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"


class SparkStartError(RuntimeError):
    """Spark could not start (no Java, bad master URL, ...); the message says what to check."""


# pyspark 4.3 warns about pandas >= 3 at session start and on every toPandas; the report only
# moves small aggregates through pandas (via Arrow), which works, so the warning is only noise.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def build_session(cfg: SparkConfig):
    """Start (or join, when one runs in this process) a Spark session configured by cfg."""
    from pyspark.sql import SparkSession

    java_opts = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    builder = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.ui.enabled", str(cfg.ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        # small aggregates reach pandas through Arrow, not row by row
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if is_local(cfg.master):
        # A local session needs no network: bind to loopback (a host name resolving to a loopback
        # address otherwise makes Spark warn and pick an outward interface). The JVM reads the
        # variable when it starts, so it is set before the session starts it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        # scans of many small Parquet files: one task per core at least
        builder = builder.config("spark.default.parallelism", str(max(cfg.shuffle_partitions, os.cpu_count() or 1)))
    for key, value in sorted(cfg.conf.items()):
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j / launcher errors: say what the report needs
        raise SparkStartError(
            f"cannot start Spark (master {cfg.master!r}): {exc}. The report needs Java 17+ "
            "(JAVA_HOME or java on PATH) and a reachable master (spark.master=...)."
        ) from exc
    spark.sparkContext.setLogLevel(cfg.log_level.upper())
    return spark


@contextlib.contextmanager
def spark_session(cfg: SparkConfig) -> Iterator["object"]:
    """A session for the duration of one report, stopped afterwards."""
    spark = build_session(cfg)
    try:
        yield spark
    finally:
        spark.stop()
