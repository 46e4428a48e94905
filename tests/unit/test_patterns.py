"""Arrival patterns (docs/workloads.md#btu-arrival-patterns): values by hand, replay verbatim, seeded
walks, configs, Fig. 7 plot."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from testbed.workloads.patterns import (
    CyclePattern,
    PatternConfig,
    PatternError,
    RandomWalkPattern,
    ReplayPattern,
    load_replay_table,
    make_pattern,
    pattern_config,
    pattern_node,
    plot_patterns,
    validate_pattern,
)

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "experiments" / "conf" / "pattern"
CSV = ROOT / "testbed" / "workloads" / "data" / "random_walk_machines.csv"
TRACE = ROOT / "experiments" / "traces" / "example.csv"


def walk(seed: int, **overrides) -> RandomWalkPattern:
    cfg = pattern_config(name="rw", kind="random_walk", step_minutes=1.0, **overrides)
    pattern = make_pattern(cfg, np.random.default_rng(seed))
    assert isinstance(pattern, RandomWalkPattern)
    return pattern


def csv_column(name: str) -> list[int]:
    with CSV.open() as fh:
        return [int(row[name]) for row in csv.DictReader(fh)]


@pytest.mark.parametrize(
    "t_s, expected",
    [(-5.0, 2), (0.0, 2), (239.9, 2), (240.0, 5), (479.9, 5), (480.0, 8), (720.0, 5),
     (960.0, 2), (1200.0, 5), (1440.0, 8), (1680.0, 5), (1920.0, 2), (7199.0, 5)],
)
def test_stepwise_by_hand(t_s: float, expected: int) -> None:
    assert make_pattern(PatternConfig()).machines_at(t_s) == expected


def test_two_level() -> None:
    p = make_pattern(pattern_config(name="two_level", levels=[2, 8], step_minutes=8.0))
    assert isinstance(p, CyclePattern)
    assert [p.machines_at(m * 60.0) for m in (0, 7.99, 8, 15.99, 16, 24, 32)] == [2, 2, 8, 8, 2, 8, 2]


@pytest.mark.parametrize("column", ["random_walk_1", "random_walk_2"])
def test_replay_is_verbatim_and_holds_last_value(column: str) -> None:
    p = make_pattern(pattern_config(name=column, kind="replay", column=column, step_minutes=1.0))
    assert isinstance(p, ReplayPattern)
    expected = csv_column(column)
    assert len(expected) == 200
    first = {"random_walk_1": [4, 4, 5, 6], "random_walk_2": [4, 3, 3, 2]}[column]
    assert [p.machines_at(m * 60.0) for m in range(4)] == first
    assert list(p.series(np.arange(200) * 60.0 + 30.0)) == expected
    assert list(p.series(np.array([200, 250, 10_000]) * 60.0)) == [expected[-1]] * 3


def test_load_replay_table() -> None:
    table = load_replay_table()
    assert list(table.columns) == ["minute", "random_walk_1", "random_walk_2"]
    assert list(table["random_walk_1"]) == csv_column("random_walk_1")
    table.loc[0, "random_walk_1"] = 99  # a copy: callers cannot corrupt later patterns
    assert load_replay_table().loc[0, "random_walk_1"] == 4


def test_random_walk_seeded_and_bounded() -> None:
    times = np.arange(0.0, 3000 * 60.0, 60.0)  # spans several draw blocks
    a = walk(7).series(times)
    assert np.array_equal(a, walk(7).series(times))
    assert not np.array_equal(a, walk(8).series(times))
    assert a[0] == 4
    assert set(np.diff(a).tolist()) <= {-1, 0, 1}
    assert a.min() >= 1 and a.max() <= 8
    assert {1, 8} <= set(a.tolist())  # long enough to touch both bounds


def test_random_walk_independent_of_query_order() -> None:
    times = np.arange(0.0, 2500 * 60.0, 60.0)
    forward = walk(3).series(times)
    p = walk(3)
    backward = [p.machines_at(t) for t in times[::-1]]  # first query jumps far ahead
    assert np.array_equal(forward, backward[::-1])


def test_random_walk_tight_bounds() -> None:
    p = walk(1, start=2, min_machines=2, max_machines=3)
    assert set(p.series(np.arange(0.0, 500 * 60.0, 60.0)).tolist()) <= {2, 3}


def test_random_walk_needs_rng() -> None:
    with pytest.raises(ValueError, match="rng"):
        make_pattern(pattern_config(kind="random_walk"))


@pytest.mark.parametrize("name", ["stepwise", "two_level", "random_walk_1", "random_walk"])
def test_series_equals_machines_at(name: str) -> None:
    p = make_pattern(load_conf(CONF / f"{name}.yaml"), np.random.default_rng(0))
    times = np.array([-10.0, 0.0, 0.5, 59.9, 60.0, 239.99, 240.0, 1234.5, 7200.0, 20_000.0])
    s = p.series(times)
    assert s.dtype == np.int64
    assert s.tolist() == [p.machines_at(t) for t in times]
    assert p.series(np.array([])).shape == (0,)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (dict(levels=[]), "levels"),
        (dict(levels=[2, -1]), "levels"),
        (dict(step_minutes=0.0), "step_minutes"),
        (dict(step_minutes=-1.0), "step_minutes"),
        (dict(name=""), "name"),
        (dict(kind="replay", column="random_walk_3"), "column"),
        (dict(kind="replay"), "column"),
        (dict(kind="random_walk", min_machines=5, max_machines=3, start=4), "min_machines"),
        (dict(kind="random_walk", start=9), "start"),
        (dict(kind="random_walk", start=0), "start"),
        (dict(kind="random_walk", p_down=0.7, p_up=0.6), "p_down"),
        (dict(kind="random_walk", p_down=-0.1), "p_down"),
        (dict(kind="random_walk", p_up=1.5), "p_up"),
    ],
)
def test_validation_names_the_key(overrides: dict, key: str) -> None:
    with pytest.raises(PatternError) as exc:
        validate_pattern(pattern_config(**overrides))
    assert exc.value.key == key
    assert isinstance(exc.value, ValueError)


def test_unknown_column_lists_available() -> None:
    with pytest.raises(PatternError, match="random_walk_1, random_walk_2"):
        make_pattern(pattern_config(kind="replay", column="nope"))


def load_conf(path: Path):
    return OmegaConf.merge(OmegaConf.structured(pattern_node()), OmegaConf.load(path))


def test_yaml_files_load_and_build() -> None:
    files = sorted(CONF.glob("*.yaml"))
    assert {f.stem for f in files} >= {  # the BTU paper's; other evaluations add theirs
        "stepwise", "two_level", "random_walk_1", "random_walk_2", "random_walk", "constant"
    }
    for f in files:
        cfg = load_conf(f)
        if cfg.kind == "trace":  # the preset needs the user's file
            cfg.path = str(TRACE)
        assert cfg.name == f.stem
        typed = OmegaConf.to_object(cfg)
        assert isinstance(typed, PatternConfig)
        validate_pattern(typed)
        assert make_pattern(cfg, np.random.default_rng(0)).machines_at(0.0) >= 1
    assert load_conf(CONF / "stepwise.yaml").levels == [2, 5, 8, 5]
    two = make_pattern(load_conf(CONF / "two_level.yaml"))
    assert [two.machines_at(t) for t in (0.0, 480.0, 960.0)] == [2, 8, 2]
    assert make_pattern(load_conf(CONF / "constant.yaml")).series(np.arange(0.0, 7200.0, 60.0)).tolist() == [4] * 120
    rw1 = make_pattern(load_conf(CONF / "random_walk_1.yaml"))
    assert rw1.series(np.arange(120) * 60.0).tolist() == csv_column("random_walk_1")[:120]


@pytest.mark.slow
def test_plot_patterns_writes_png(tmp_path: Path) -> None:
    import matplotlib.image

    patterns = [make_pattern(load_conf(CONF / f"{n}.yaml"), np.random.default_rng(0))
                for n in ("stepwise", "two_level", "random_walk_1", "random_walk_2", "random_walk")]
    out = plot_patterns(patterns, 120 * 60.0, tmp_path / "figs" / "patterns.png")
    assert out == tmp_path / "figs" / "patterns.png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = matplotlib.image.imread(out)
    assert image.shape[1] > image.shape[0]  # panels side by side
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 2
    again = plot_patterns(patterns, 120 * 60.0, tmp_path / "again.png")
    assert again.read_bytes() == data  # deterministic
