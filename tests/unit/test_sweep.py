"""`testbed sweep`: the grid, the run digests, resuming, and the progress line (local executor;
the Spark executors are in tests/integration/test_sweep_spark.py)."""
from __future__ import annotations

import io

import pytest

from testbed.config import ConfigError
from testbed.eventlog import finish_manifest, read_manifest
from testbed.progress import Outcome, Progress
from testbed.sweep import expand, parse_options, plan_sweep, run_sweep, swept_keys

SMALL = ["policy=btu", "reps=1", "duration_min=10"]


def test_the_grid_is_the_cartesian_product_in_hydra_order():
    points = expand(["pattern=stepwise,two_level", "billing.btu_minutes=range(10,70,50)", "reps=1"])
    assert points == [
        ("pattern=stepwise", "billing.btu_minutes=10", "reps=1"),
        ("pattern=stepwise", "billing.btu_minutes=60", "reps=1"),
        ("pattern=two_level", "billing.btu_minutes=10", "reps=1"),
        ("pattern=two_level", "billing.btu_minutes=60", "reps=1"),
    ]
    assert swept_keys(points) == ["pattern", "billing.btu_minutes"]
    assert expand(["reps=1"]) == [("reps=1",)]


@pytest.mark.slow
def test_run_folders_are_named_by_what_the_run_computes(tmp_path):
    out, runs = plan_sweep([*SMALL, "billing.btu_minutes=10,60", f"out={tmp_path / 'a'}"])
    assert out == (tmp_path / "a").resolve()
    assert [r.spec.label for r in runs] == ["btu-10[billing.btu_minutes=10]", "btu-60[billing.btu_minutes=60]"]
    assert {r.spec.run_dir.parent for r in runs} == {out / "runs"}
    assert len({r.digest for r in runs}) == 2
    # another folder or worker count: the same runs; another seed: other runs
    _, elsewhere = plan_sweep([*SMALL, "billing.btu_minutes=10,60", f"out={tmp_path / 'b'}", "workers=1"])
    assert [r.digest for r in elsewhere] == [r.digest for r in runs]
    _, reseeded = plan_sweep([*SMALL, "billing.btu_minutes=10,60", f"out={tmp_path / 'a'}", "seed=2"])
    assert not {r.digest for r in reseeded} & {r.digest for r in runs}


def test_a_point_equal_to_another_runs_once(tmp_path):
    # 60 is the default BTU length: "billing.btu_minutes=60" and no override resolve to the same run
    _, runs = plan_sweep([*SMALL, "billing.btu_minutes=60,60", f"out={tmp_path}"])
    assert len(runs) == 1


def test_a_bad_point_fails_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="policies.btu.nope"):
        plan_sweep([*SMALL, "policies.btu.nope=1,2", f"out={tmp_path}"])
    with pytest.raises(ConfigError, match="executor"):
        parse_options(["executor=yarn"])
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_rerun_runs_only_what_is_missing_or_failed(tmp_path, capsys):
    args = [*SMALL, "billing.btu_minutes=10,30,60", f"out={tmp_path}", "workers=1"]
    overrides, options = parse_options(args)
    first = run_sweep(overrides, options)
    assert first == {"complete": 3, "incomplete": 0, "skipped": 0, "total": 3}
    _, runs = plan_sweep(overrides)
    kept = {p.name: p.stat().st_mtime_ns for p in runs[0].spec.run_dir.iterdir()}
    # an interrupted sweep: one run never finished, one was cut off
    import shutil

    shutil.rmtree(runs[1].spec.run_dir)
    finish_manifest(runs[2].spec.run_dir, "incomplete", error="interrupted")
    again = run_sweep(overrides, options)
    assert again == {"complete": 2, "incomplete": 0, "skipped": 0, "total": 3}
    assert {p.name: p.stat().st_mtime_ns for p in runs[0].spec.run_dir.iterdir()} == kept  # untouched
    assert all(read_manifest(r.spec.run_dir).status == "complete" for r in runs)
    assert not (tmp_path / ".staging").exists()
    index = (tmp_path / "sweep.csv").read_text().splitlines()
    assert len(index) == 4 and all(line.endswith(",complete") for line in index[1:])
    assert "2/2 runs (2 done, 0 failed" in capsys.readouterr().err


def test_progress_estimates_the_time_left_from_the_runs_of_this_session():
    stream = io.StringIO()
    progress = Progress(total=4, stream=stream, every_s=0.0)
    progress.t0 -= 10.0  # ten seconds ago
    progress(Outcome("a", "skipped", 0.0))
    progress(Outcome("b", "complete", 5.0))
    progress(Outcome("c", "incomplete", 1.0, error="ValueError: boom"))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("sweep: 1/4 runs (0 done, 0 failed, 1 already complete)") and lines[0].endswith("about "
                                                                                                               "? left")
    # 10 s for 1 run that ran, 2 left -> about 20 s
    assert lines[1].startswith("sweep: 2/4 runs (1 done") and lines[1].endswith("about 20 s left")
    assert lines[2] == "sweep: run c failed: ValueError: boom"
    assert "3/4 runs (1 done, 1 failed, 1 already complete)" in lines[3]
