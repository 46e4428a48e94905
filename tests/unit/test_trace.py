"""The `trace` workload (testbed/workloads/trace.py): a user's CSV or Parquet file parsed, held between
samples, looped or held after its end, as machines or as items/s; every bad file named in one line
before anything runs; the example trace end to end through the `testbed` command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from testbed.config import ConfigError
from testbed.eventlog import find_runs, read_manifest
from testbed.workloads.patterns import make_pattern, pattern_config
from testbed.workloads.trace import TracePattern, load_trace
from tests import guarded
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "experiments" / "traces" / "example.csv"


def trace(path: Path, **settings) -> TracePattern:
    pattern = make_pattern(pattern_config(kind="trace", name="mine", path=str(path), **settings))
    assert isinstance(pattern, TracePattern)
    return pattern


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_step_hold_before_between_and_after_the_samples(tmp_path) -> None:
    p = trace(write(tmp_path, "t,value\n10,2\n70,5\n130,3\n"))
    # times from the first row: 0, 60, 120; the last value lasts one more interval, then is held
    times = np.array([-5.0, 0.0, 59.9, 60.0, 119.0, 120.0, 179.0, 500.0])
    assert p.series(times).tolist() == [2, 2, 2, 5, 5, 3, 3, 3]
    assert p.series(times).tolist() == [p.machines_at(t) for t in times]
    assert p.series(times).dtype == np.int64


def test_linear_hold_rounds_to_whole_machines(tmp_path) -> None:
    p = trace(write(tmp_path, "t,value\n0,2\n60,8\n"), hold="linear")
    assert p.values(np.array([0.0, 15.0, 30.0, 60.0, 90.0])).tolist() == [2.0, 3.5, 5.0, 8.0, 8.0]
    assert p.series(np.array([0.0, 30.0, 45.0])).tolist() == [2, 5, 6]  # 6.5 rounds to even


def test_loop_starts_again_after_one_more_interval(tmp_path) -> None:
    p = trace(write(tmp_path, "minute,machines\n0,1\n1,2\n2,3\n"), time_unit="min", end="loop")
    minutes = np.arange(0, 9) * 60.0 + 1.0
    assert p.series(minutes).tolist() == [1, 2, 3, 1, 2, 3, 1, 2, 3]
    assert len(p.rates) == 7 * 24 * 3600 and p.rates[180] == 1.0  # a looping trace covers the longest run


def test_rate_values_become_machines_and_job_rates(tmp_path) -> None:
    path = write(tmp_path, "t,rate\n0,100\n1,250\n2,40\n")
    p = trace(path, value="rate", rate_per_machine=50.0, scale=2.0)
    assert p.series(np.array([0.0, 1.0, 2.0])).tolist() == [4, 10, 2]
    assert p.rates.tolist() == [200.0, 500.0, 80.0]  # job mode: the scaled items/s of each second
    machines = trace(path)  # value=machines: the same file as load levels; job mode still gets its shape
    assert machines.series(np.array([1.0])).tolist() == [250] and machines.rates.tolist() == [100.0, 250.0, 40.0]


def test_columns_by_name_and_timestamps(tmp_path) -> None:
    path = write(tmp_path, "when,a,b\n2024-05-01T10:00:00,1,7\n2024-05-01T10:00:30,2,8\n2024-05-01T10:02:00,3,9\n")
    p = trace(path, time_column="when", time_unit="timestamp", column="b")
    assert p.times_s.tolist() == [0.0, 30.0, 120.0]
    assert p.series(np.array([0.0, 31.0, 121.0])).tolist() == [7, 8, 9]


def test_parquet_with_a_datetime_column(tmp_path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"ts": pd.to_datetime(["2024-01-01 00:00", "2024-01-01 00:01"]), "v": [3.0, 4.0]}).to_parquet(path)
    p = trace(path, time_unit="timestamp")
    assert p.times_s.tolist() == [0.0, 60.0] and p.series(np.array([59.0, 60.0])).tolist() == [3, 4]
    with pytest.raises(ValueError, match="time_unit: column 'ts' holds timestamps"):
        trace(path)


def test_a_changed_file_is_read_again(tmp_path) -> None:
    path = write(tmp_path, "t,v\n0,1\n")
    assert load_trace(str(path)).values.tolist() == [1.0]
    path.write_text("t,v\n0,2\n1,3\n")
    assert load_trace(str(path)).values.tolist() == [2.0, 3.0]


BAD_FILES = [
    # (file name, content, extra overrides, key, message part)
    ("a.csv", None, (), "pattern.path", "no such file"),
    ("a.csv", "t,value\n0,1\n", ("pattern.column=rate",), "pattern.column",
     "column 'rate' not found (columns: t, value)"),
    ("a.csv", "t,value\n0,1\n", ("pattern.time_column=time",), "pattern.time_column", "column 'time' not found"),
    ("a.csv", "t,a,b\n0,1,2\n", (), "pattern.column", "several value columns (a, b)"),
    ("a.csv", "t,value\n0,1\n60,abc\n", (), "pattern.path", "row 2: value 'abc' is not a number"),
    ("a.csv", "t,value\n0,1\n60,\n", (), "pattern.path", "row 2: value '' is not a number"),
    ("a.csv", "t,value\n0,1\nx,2\n", (), "pattern.path", "row 2: t 'x' is not a number"),
    ("a.csv", "t,value\n0,1\n60,2\n60,3\n", (), "pattern.path", "row 3: times must increase, but 60 s follows 60 s"),
    ("a.csv", "t,value\n0,1\n60,2\n30,3\n", (), "pattern.path", "row 3: times must increase"),
    ("a.csv", "t,value\n0,1\n60,-2\n", (), "pattern.path", "row 2: negative value -2"),
    ("a.csv", "", (), "pattern.path", "has no rows"),
    ("a.csv", "t,value\n", (), "pattern.path", "has no rows"),
    ("a.xlsx", "t,value\n0,1\n", (), "pattern.path", "unsupported file type '.xlsx'"),
    ("a.parquet", "t,value\n0,1\n", (), "pattern.path", "is not a readable Parquet file"),
    ("a.csv", "t,value\nmonday,1\n", ("pattern.time_unit=timestamp",), "pattern.path",
     "row 1: t 'monday' is not a timestamp"),
    ("a.csv", "t,value\n0,1\n", ("pattern.time_unit=days",), "pattern.time_unit", "'days' is none of"),
    ("a.csv", "t,value\n0,1\n", ("pattern.scale=0",), "pattern.scale", "must be > 0"),
    ("a.csv", "t,value\n0,1\n", ("pattern.end=wrap",), "pattern.end", "none of hold, loop"),
]


@pytest.mark.parametrize("name, content, extra, key, message", BAD_FILES)
def test_a_bad_file_is_named_before_anything_runs(tmp_path, name, content, extra, key, message) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        compose_config("pattern=trace", f"pattern.path={path}", f"out={tmp_path / 'runs'}", *extra)
    assert err.value.key == key, str(err.value)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()


def test_a_trace_needs_a_path() -> None:
    with pytest.raises(ConfigError, match=r"pattern.path: a trace needs a file") as err:
        compose_config("pattern=trace")
    assert err.value.key == "pattern.path"


def test_parquet_without_pyarrow_names_the_package(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"t": [0, 1], "v": [1, 2]}).to_parquet(path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed: its import fails
    with pytest.raises(ConfigError, match="needs the package pyarrow") as err:
        compose_config("pattern=trace", f"pattern.path={path}")
    assert err.value.key == "pattern.path"


def test_the_example_trace_builds_for_both_modes() -> None:
    cfg = compose_config("pattern=trace", f"pattern.path={EXAMPLE}")
    p = make_pattern(cfg.pattern)
    machines = p.series(np.arange(0.0, 7200.0, 60.0))
    assert machines.min() == 1 and machines.max() == 8 and len(set(machines.tolist())) == 8
    job = compose_config("evaluation=daedalus", "pattern=trace", f"pattern.path={EXAMPLE}")
    assert job.job.enabled and np.asarray(make_pattern(job.pattern).rates).max() == 8.0  # type: ignore[attr-defined]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return guarded.run([sys.executable, "-m", "testbed.cli", *args], cwd=cwd, cpu_s=1200,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_the_example_trace_runs_the_btu_evaluation(tmp_path) -> None:
    out = tmp_path / "runs"
    proc = run_cli("experiment", "evaluation=btu", "pattern=trace", f"pattern.path={EXAMPLE}", "reps=1",
                   "duration_min=10", f"out={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = find_runs(out / "trace")
    assert sorted(r.parent.name for r in runs) == ["btu-10", "btu-30", "btu-60", "threshold"]
    manifest = read_manifest(runs[0])
    assert manifest.status == "complete" and manifest.resolved_config["pattern"]["path"] == str(EXAMPLE)
    assert manifest.details["workload_sha256"] == load_trace(str(EXAMPLE)).sha256  # the file's provenance
    assert "btu-60" in proc.stdout and (out / "trace" / "summary.csv").is_file()


@pytest.mark.slow  # a testbed subprocess (make test-unit leaves it out)
def test_a_bad_trace_stops_the_command_with_one_line(tmp_path) -> None:
    proc = run_cli("experiment", "pattern=trace", "pattern.path=/nonexistent/x.csv", f"out={tmp_path / 'runs'}",
                   cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "config error: pattern.path: no such file '/nonexistent/x.csv'"
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # a whole job-mode simulation
def test_the_example_trace_drives_job_mode(tmp_path) -> None:
    from testbed.eventlog import EventLog
    from testbed.experiment import run_experiment

    cfg = compose_config("evaluation=daedalus", "pattern=trace", f"pattern.path={EXAMPLE}",
                         "evaluation.only=[static-12]", "reps=1", "duration_min=30", "summary=false",
                         f"out={tmp_path / 'runs'}")
    (run,) = run_experiment(cfg)
    assert read_manifest(run).status == "complete"
    load = EventLog(run).read("load")
    # the items arriving in each second: the example's minute-by-minute levels, held for each second
    expected = np.repeat(pd.read_csv(EXAMPLE)["value"].to_numpy()[:30], 60)
    assert load["items"].to_numpy().tolist() == expected.tolist()


# ---- the Daedalus authors' traces: pipe-separated; every run's manifest records the file's SHA-256 ------

ADS = "second|adCount\n0|100\n1|120\n2|90\n3|150\n"


@pytest.mark.parametrize("text, extra", [
    (ADS, ()), (ADS, ("pattern.column=adCount",)), (ADS, ("pattern.delimiter=pipe",)),
    (ADS.replace("|", ";"), ()), (ADS.replace("|", "\t"), ()), (ADS.replace("|", ","), ()),
    (ADS.replace("|", ";"), ("pattern.delimiter=semicolon",)), (ADS.replace("|", "\t"), ("pattern.delimiter=tab",)),
])
def test_the_delimiter_is_found_or_given(tmp_path, text, extra) -> None:
    path = write(tmp_path, text)
    cfg = compose_config("evaluation=daedalus", "pattern=trace", f"pattern.path={path}", *extra)
    assert np.asarray(make_pattern(cfg.pattern).rates).tolist() == [100, 120, 90, 150]  # type: ignore[attr-defined]


def test_a_one_column_file_and_a_bad_delimiter_are_named(tmp_path) -> None:
    path = write(tmp_path, "adCount\n100\n120\n")
    with pytest.raises(ConfigError, match="no value column") as err:
        compose_config("pattern=trace", f"pattern.path={path}")
    assert err.value.key == "pattern.column"
    with pytest.raises(ConfigError, match="'x' is none of comma, semicolon, tab, pipe") as err:
        compose_config("pattern=trace", f"pattern.path={write(tmp_path, ADS)}", "pattern.delimiter=x")
    assert err.value.key == "pattern.delimiter"
    with pytest.raises(ConfigError, match=r"column 'adCount' not found \(columns: second\|adCount\)"):
        compose_config("pattern=trace", f"pattern.path={write(tmp_path, ADS)}", "pattern.delimiter=comma",
                       "pattern.column=adCount")


class _FakeEngineRun:
    """A job run on a real engine, faked: what execute() gets back from FlinkJobRun or LiveJobRun."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def run(self):
        from testbed.run_result import RunResult

        return RunResult({}, 4.0, {"engine": "fake"})


@pytest.mark.parametrize("evaluation, only, runner", [
    ("btu", "threshold", None),  # operator mode, as before
    ("daedalus", "static-12", None),  # the simulator's job mode, a run of 4 s of the trace
    ("daedalus_flink", "static-2", "testbed.live.flink_job.FlinkJobRun"),
    ("daedalus_live", "static-12", "testbed.live.job.LiveJobRun"),
])
def test_every_manifest_records_the_traces_sha256(tmp_path, monkeypatch, evaluation, only, runner) -> None:
    import hashlib

    from testbed.experiment import execute, plan_runs

    if runner is not None:
        monkeypatch.setattr(runner, _FakeEngineRun)
    path = write(tmp_path, ADS)
    cfg = compose_config(f"evaluation={evaluation}", "pattern=trace", f"pattern.path={path}", "reps=1",
                         "duration_min=1", f"evaluation.only=[{only}]", f"out={tmp_path / 'runs'}")
    (spec,) = plan_runs(cfg)
    manifest = read_manifest(execute(cfg, spec))
    assert manifest.status == "complete"
    assert manifest.details["workload_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
