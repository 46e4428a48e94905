"""The one Spark session of a report: master and settings from the reporting config, quiet and quick
to start (no UI, few shuffle partitions, JVM logging at ERROR), started in the background while the
report reads the run folders (`SessionStart`)."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional

from reporting.class_archive import ClassArchive
from reporting.report_config import SparkConfig

LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
# A report's driver JVM lives for seconds to a minute; the serial collector needs no threads of its
# own. JIT: in a small report C1 alone compiles the hot code (C2's compiler threads would take more
# CPU than the report itself on a small machine); a large one runs its row loops long enough for
# C2 to pay off, but only there, so C2 waits for methods ten times hotter than by default.
DRIVER_JAVA_OPTIONS = ("-XX:+UseSerialGC",)
LARGE_INPUT_BYTES = 64 << 20
SMALL_INPUT_JIT = ("-XX:TieredStopAtLevel=1",)
LARGE_INPUT_JIT = ("-XX:Tier4InvocationThreshold=50000", "-XX:Tier4CompileThreshold=60000",
                   "-XX:Tier4BackEdgeThreshold=200000")


class SparkStartError(RuntimeError):
    """Spark could not start (no Java, bad master URL, ...); the message says what to check."""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def build_session(cfg: SparkConfig, archive: Optional[ClassArchive] = None, input_bytes: int = 0):
    """Start (or join, when one runs in this process) a Spark session configured by cfg, its JVM
    using (or recording for) the class archive if one is given, its JIT set for input_bytes."""
    from pyspark.sql import SparkSession

    jit = LARGE_INPUT_JIT if input_bytes >= LARGE_INPUT_BYTES else SMALL_INPUT_JIT
    java_opts = " ".join([f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}", *DRIVER_JAVA_OPTIONS, *jit,
                          *(archive.java_options() if archive else [])])
    builder = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.ui.enabled", str(cfg.ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        # the driver lists a report's files itself (Spark's default starts a job per table for more
        # than 32 files, which takes longer than listing thousands of files)
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
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


class SessionStart:
    """A session starting in a background thread: the JVM takes seconds to start, during which the
    report reads manifests and table schemas. `session()` waits for it (raising SparkStartError
    if it failed); `stop()` stops it in the background (once it has started; first archiving
    its classes if cfg.class_archive asks for it and there is no archive yet), `join()` waits
    until it is stopped; `abort()` cancels the archive's dump (nothing of it stays) and stops."""

    def __init__(self, cfg: SparkConfig, input_bytes: int = 0):
        self._spark = None
        self._error: BaseException | None = None
        self._archive = ClassArchive() if cfg.class_archive else None
        self._thread = threading.Thread(target=self._start, args=(cfg, input_bytes), name="spark-start", daemon=True)
        self._thread.start()
        self._stopping: threading.Thread | None = None

    def _start(self, cfg: SparkConfig, input_bytes: int) -> None:
        try:
            self._spark = build_session(cfg, self._archive, input_bytes)
        except BaseException as exc:  # handed to the thread waiting in session()
            self._error = exc

    def session(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._spark

    def stop(self) -> None:
        if self._stopping is None:
            self._stopping = threading.Thread(target=self._stop, name="spark-stop")
            self._stopping.start()

    def _stop(self) -> None:
        self._thread.join()
        if self._spark is not None:
            if self._archive is not None and self._archive.recording:
                self._archive.dump(self._spark._jvm.java.lang.ProcessHandle.current().pid())
            self._spark.stop()
            self._spark = None

    def join(self) -> None:
        if self._stopping is not None:
            self._stopping.join()

    def abort(self) -> None:
        """The report was interrupted: stop archiving (removing what the dump wrote) and stop the
        session in the background."""
        if self._archive is not None:
            self._archive.cancel()
        self.stop()
