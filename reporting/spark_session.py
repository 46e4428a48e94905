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


def _import_pyspark():
    # pyspark warns about pandas >= 3 on import; the report only moves small aggregates through
    # pandas (Arrow), which works, so the warning would only be noise in every report.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pyspark.sql  # noqa: F401
        from pyspark.sql import SparkSession
    return SparkSession


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def build_session(cfg: SparkConfig):
    """Start (or join, when one runs in this process) a Spark session configured by cfg."""
    SparkSession = _import_pyspark()
    java_opts = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    builder = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.default.parallelism", str(max(cfg.shuffle_partitions, os.cpu_count() or 1)))
        .config("spark.ui.enabled", str(cfg.ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # times are float seconds; no session time zone effects, but keep output independent of the host
        .config("spark.sql.session.timeZone", "UTC")
    )
    if is_local(cfg.master):
        # a host name resolving to a loopback address makes Spark warn and guess an interface
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
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
