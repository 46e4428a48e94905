"""Configuration of the reporting job: typed defaults, overridable as `key=value` on the command line.

    testbed report RUNS_DIR out=DIR spark.master=local[2] spark.conf.spark.executor.memory=4g

A misspelt key fails naming the key. `spark.conf.<any Spark key>=<value>` passes a Spark setting
through verbatim (the part after `spark.conf.` may itself contain dots).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Sequence, get_type_hints

from testbed.arguments import as_bool


class ReportConfigError(ValueError):
    """An unknown key or a value of the wrong type; the message names the key."""


@dataclass
class SparkConfig:
    # local[*] needs nothing running; any master URL (spark://host:7077, yarn, k8s://...) works when
    # the runs folder is readable at the same path by the executors (shared filesystem).
    master: str = "local[*]"
    app_name: str = "testbed-report"
    # A report's tables are small (48 runs, ~10 M samples): a few shuffle partitions beat Spark's 200.
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    log_level: str = "ERROR"  # JVM and Spark logging; WARN shows Spark's warnings
    ui: bool = False  # the Spark web UI costs start-up time and a port
    # keep the classes the driver JVM loads in an archive for the next report's JVM (seconds
    # faster to start; ~/.cache/testbed, written once by the first report, reporting.class_archive)
    class_archive: bool = True
    conf: Dict[str, str] = field(default_factory=dict)  # further Spark settings, verbatim


@dataclass
class ReportConfig:
    out: str = ""  # output folder; empty = RUNS_DIR/report
    figures: bool = True  # False: tables, report.md and index.html only (faster)
    dpi: int = 100
    spark: SparkConfig = field(default_factory=SparkConfig)


def _convert(key: str, text: str, type_: Any) -> Any:
    if type_ is bool:
        try:
            return as_bool(text.strip())
        except ValueError:
            raise ReportConfigError(f"{key}: expected true or false, got {text!r}") from None
    if type_ in (int, float):
        try:
            return type_(text)
        except ValueError:
            raise ReportConfigError(f"{key}: expected {type_.__name__}, got {text!r}") from None
    return text


def _known_keys(node: Any, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            keys.extend(_known_keys(value, f"{prefix}{f.name}."))
        else:
            keys.append(f"{prefix}{f.name}" + (".<spark key>" if f.name == "conf" else ""))
    return keys


def parse_overrides(overrides: Sequence[str], base: ReportConfig | None = None) -> ReportConfig:
    """Apply `key=value` overrides to the defaults (or to `base`); unknown keys raise, naming the key."""
    cfg = dataclasses.replace(base) if base is not None else ReportConfig()
    cfg.spark = dataclasses.replace(cfg.spark, conf=dict(cfg.spark.conf))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ReportConfigError(f"{item!r}: expected key=value")
        if key.startswith("spark.conf."):
            spark_key = key[len("spark.conf."):]
            if not spark_key:
                raise ReportConfigError(f"{key}: name the Spark setting after spark.conf.")
            cfg.spark.conf[spark_key] = value
            continue
        node: Any = cfg
        parts = key.split(".")
        for i, part in enumerate(parts):
            names = {f.name for f in dataclasses.fields(node)}
            if part not in names:
                raise ReportConfigError(f"unknown key {key!r}; known: {', '.join(_known_keys(ReportConfig()))}")
            if i < len(parts) - 1:
                node = getattr(node, part)
                if not dataclasses.is_dataclass(node):
                    raise ReportConfigError(f"unknown key {key!r}: {'.'.join(parts[:i + 1])} has no sub-keys")
        leaf = parts[-1]
        type_ = get_type_hints(type(node))[leaf]
        if dataclasses.is_dataclass(getattr(node, leaf)) or leaf == "conf":
            raise ReportConfigError(f"{key}: is a group; set one of its keys")
        setattr(node, leaf, _convert(key, value, type_))
    validate(cfg)
    return cfg


def validate(cfg: ReportConfig) -> None:
    if cfg.spark.shuffle_partitions < 1:
        raise ReportConfigError(f"spark.shuffle_partitions: must be >= 1, got {cfg.spark.shuffle_partitions}")
    if cfg.dpi < 10:
        raise ReportConfigError(f"dpi: must be >= 10, got {cfg.dpi}")
    if not cfg.spark.master:
        raise ReportConfigError("spark.master: must not be empty")
