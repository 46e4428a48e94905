"""Event-log schema, Parquet round trips, determinism and the manifest."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

from testbed import eventlog
from testbed.eventlog import (
    SCHEMA_VERSION,
    TABLES,
    EventLog,
    EventLogError,
    Manifest,
    code_revision,
    find_runs,
    finish_manifest,
    package_versions,
    read_manifest,
    run_dir_for,
    write_manifest,
)

ROWS: Dict[str, Dict[str, Any]] = {
    "load": {"t_s": [0.0, 15.0], "machines": [1, 3], "source": ["S1", "S1"], "items": [10, 30],
             "lateness_ms": [0.0, 2.5]},
    "samples": {"t_s": [0.5, 1.0], "operator": ["O1", "O2"], "instance": ["O1-0", "O2-1"],
                "duration_ms": [12.5, 800.0]},
    "processed": {"t_s": [15.0, 30.0], "operator": ["O1", "O1"], "items": [100, 120]},
    "queues": {"t_s": [15.0, 15.0], "operator": ["O1", "O2"], "depth": [0, 51]},
    "instances": {"t_s": [15.0], "operator": ["O1"], "instances": [2], "starting": [1], "hosts": [1]},
    "hosts": {"t_s": [15.0, 30.0], "leased": [1, 2], "ready": [1, 1]},
    "actions": {"t_s": [0.0, 60.0, 120.0], "action": ["lease", "scale_up", "migrate"],
                "operator": [None, "O2", "O3"], "instance": [None, "O2-1", "O3-0"],
                "host": ["h1", "h1", "h1"], "target_host": [None, None, "h2"],
                "reason": ["no room", "queue 51 > 50", "release h1"], "policy": ["btu"] * 3},
    "leases": {"host": ["h1", "h2"], "start_s": [0.0, 60.0], "end_s": [1190.0, 7200.0],
               "btu_s": [600.0, 600.0], "paid_btus": [2, 12], "prolongations": [1, 11],
               "released": [True, False]},
    "edges": {"t_s": [15.0, 15.0], "source": ["S2", "O1"], "target": ["O1", "O3"], "items": [31, 30]},
    "instance_stats": {"t_s": [15.0], "operator": ["O1"], "instance": ["O1-1"], "processed": [30],
                       "utilisation": [0.95]},
    "instance_cpu": {"t_s": [15.0, 15.0], "operator": ["O1", "O3"], "instance": ["O1-1", "O3-1"],
                     "busy_ms": [14250.0, 90.0], "cpu_ms": [6100.0, None], "run_delay_ms": [2300.0, None],
                     "container_cpu_ms": [6400.0, None]},
    "dropped": {"t_s": [60.0], "operator": ["O3"], "reason": ["purge"], "items": [12]},
    "latency": {"t_s": [20.5], "operator": ["O9"], "latency_ms": [4210.0]},
    "forecasts": {"t_s": [60.0, 120.0], "controller": ["job", "job"], "model": ["linear", "arima"],
                  "wape": [float("inf"), 0.02], "horizon_max": [23000.0, 24100.5], "mode": ["fast", "fast"]},
    "capacity": {"t_s": [120.0], "controller": ["job"], "scaleout": [12], "estimated": [44915], "observed": [44915]},
    "recovery": {"t_s": [660.0], "controller": ["job"], "scaleout": [8], "predicted_s": [455.0], "observed_s": [212.0],
                 "downtime_s": [30.0]},
    "rescales": {"t_s": [660.0], "from_n": [7], "to_n": [8], "downtime_s": [33.0], "replayed": [377814],
                 "lag_before": [1363.6], "recovered_s": [310.0], "capacity_before": [29062.6],
                 "capacity_after": [37610.5]},
    "placements": {"t_s": [0.0, 100.0], "action": ["scale_up", "migrate"], "operator": ["T1", "T1"],
                   "instance": ["T1-1", "T1-1"], "host": ["vm1", "vm4"],
                   "reason": ["odp solve 1: optimal", "odp solve 2: optimal"], "solve": [1, None],
                   "solver_status": ["optimal", None], "objective": [0.81, None], "gap": [0.0, None],
                   "solve_s": [0.4, None], "solve_cpu_s": [0.3, None]},
    "host_traffic": {"t_s": [10.0], "source_host": ["vm1"], "target_host": ["vm4"], "items": [100],
                     "delay_ms": [18.6]},
}


def test_every_table_has_example_rows() -> None:
    assert sorted(ROWS) == sorted(TABLES)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_round_trip(tmp_path: Path, table: str) -> None:
    log = EventLog(tmp_path / "run")
    path = log.write(table, ROWS[table])
    assert path == tmp_path / "run" / f"{table}.parquet"
    df = log.read(table)
    assert list(df.columns) == TABLES[table].names
    for name, values in ROWS[table].items():
        got = [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in df[name].tolist()]
        assert got == values, name


def test_read_casts_to_schema_types(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.write("instances", {"t_s": np.array([1, 2]), "operator": ["O1", "O1"],
                            "instances": np.array([1, 2], dtype=np.int64), "starting": [0, 0], "hosts": [1, 1]})
    df = log.read("instances")
    assert df["t_s"].dtype == np.float64 and df["instances"].dtype == np.int32


def test_empty_table_round_trip(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.write("samples", {name: [] for name in TABLES["samples"].names})
    df = log.read("samples")
    assert df.empty and list(df.columns) == TABLES["samples"].names


def test_wrong_columns_named(tmp_path: Path) -> None:
    columns = {"t_s": [1.0], "operator": ["O1"], "depth_typo": [3], "extra": [1]}
    with pytest.raises(EventLogError) as err:
        EventLog(tmp_path).write("queues", columns)
    message = str(err.value)
    assert "'queues'" in message and "depth" in message and "depth_typo" in message and "extra" in message


def test_lossy_cast_and_missing_values_rejected(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    with pytest.raises(EventLogError, match="'depth'"):
        log.write("queues", {"t_s": [1.0], "operator": ["O1"], "depth": [1.5]})
    with pytest.raises(EventLogError, match="'operator'.*missing"):
        log.write("queues", {"t_s": [1.0], "operator": [None], "depth": [1]})
    with pytest.raises(EventLogError, match="length"):
        log.write("queues", {"t_s": [1.0, 2.0], "operator": ["O1"], "depth": [1]})
    with pytest.raises(EventLogError, match="unknown action"):
        log.write("actions", {**ROWS["actions"], "action": ["lease", "scale_sideways", "migrate"]})
    with pytest.raises(EventLogError, match="unknown table"):
        log.write("nope", {})


def test_same_data_gives_identical_bytes(tmp_path: Path) -> None:
    a, b = EventLog(tmp_path / "a"), EventLog(tmp_path / "b")
    for table in sorted(TABLES):
        a.write(table, ROWS[table])
        # the same values given as numpy arrays must not change the file either
        b.write(table, {k: np.array(v, dtype=object) if None in v else np.array(v) for k, v in ROWS[table].items()})
        assert a.path(table).read_bytes() == b.path(table).read_bytes(), table
    a.write("samples", ROWS["samples"])  # rewriting replaces the file with the same bytes
    assert a.path("samples").read_bytes() == b.path("samples").read_bytes()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(f"{t}.parquet" for t in TABLES)


def test_absent_table_names_file(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="leases.parquet"):
        EventLog(tmp_path).read("leases")


def test_a_file_from_before_a_column_was_added_reads_it_as_null(tmp_path: Path) -> None:
    """instance_cpu files written before run_delay_ms existed: the other columns as written, it null;
    a file missing another column is still refused."""
    import pyarrow.parquet as pq

    log = EventLog(tmp_path)
    log.write("instance_cpu", ROWS["instance_cpu"])
    written = pq.read_table(log.path("instance_cpu"))
    pq.write_table(written.drop_columns(["run_delay_ms"]), log.path("instance_cpu"))
    old = log.read("instance_cpu")
    assert list(old.columns) == TABLES["instance_cpu"].names and old.run_delay_ms.isna().all()
    assert old.cpu_ms.iloc[0] == 6100.0 and old.container_cpu_ms.iloc[0] == 6400.0
    pq.write_table(written.drop_columns(["run_delay_ms", "cpu_ms"]), log.path("instance_cpu"))
    with pytest.raises(EventLogError, match="differ from schema"):
        log.read("instance_cpu")


def _manifest(**changes: Any) -> Manifest:
    values: Dict[str, Any] = dict(
        run_id="r1", experiment="paper", pattern="stepwise", config="btu-10", policy="btu", btu_minutes=10,
        rep=1, seed=7, seeds={"load": 11, "service": 12}, backend="sim",
        resolved_config={"billing": {"btu_minutes": 10}}, code_revision="abc", versions={"python": "3.11"},
    )
    values.update(changes)
    return Manifest(**values)


def test_manifest_round_trip_and_finish(tmp_path: Path) -> None:
    manifest = _manifest()
    path = write_manifest(tmp_path, manifest)
    assert path == tmp_path / "manifest.json"
    text = path.read_text()
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION
    assert list(json.loads(text)) == sorted(json.loads(text))  # sorted keys: stable diffs
    assert read_manifest(tmp_path) == manifest
    assert manifest.status == "running" and manifest.ended_at is None

    finished = finish_manifest(tmp_path, "incomplete", error="boom", sim_duration_s=60.0)
    again = read_manifest(tmp_path)
    assert again == finished
    assert (again.status, again.error, again.sim_duration_s) == ("incomplete", "boom", 60.0)
    assert again.ended_at is not None and again.started_at == manifest.started_at
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp files left behind
    with pytest.raises(EventLogError):
        finish_manifest(tmp_path, "running")


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"run_id": "r1"}'])
def test_corrupt_manifest_names_file(tmp_path: Path, content: str) -> None:
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(EventLogError, match="manifest.json"):
        read_manifest(tmp_path)


def test_missing_manifest_names_file(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="manifest.json"):
        read_manifest(tmp_path / "nowhere")


def test_run_dirs(tmp_path: Path) -> None:
    assert run_dir_for(tmp_path, "stepwise", "btu-10", 2) == tmp_path / "stepwise" / "btu-10" / "2"
    for pattern, config, rep in [("two_level", "threshold", 1), ("stepwise", "btu-10", 2), ("stepwise", "btu-10", 1)]:
        write_manifest(run_dir_for(tmp_path, pattern, config, rep), _manifest(pattern=pattern, config=config, rep=rep))
    (tmp_path / "stepwise" / "not-a-run").mkdir()
    assert find_runs(tmp_path) == [
        tmp_path / "stepwise" / "btu-10" / "1", tmp_path / "stepwise" / "btu-10" / "2",
        tmp_path / "two_level" / "threshold" / "1",
    ]


def test_code_revision_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert code_revision(tmp_path) == "unknown"  # not a repository

    def timeout(*args: Any, **kwargs: Any) -> None:
        raise subprocess.TimeoutExpired("git", 10)

    monkeypatch.setattr(eventlog.subprocess, "run", timeout)
    assert code_revision(tmp_path) == "unknown"


def test_package_versions() -> None:
    versions = package_versions()
    assert {"python", "numpy", "pandas", "pyarrow"} <= set(versions)
