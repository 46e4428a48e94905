"""Arrival patterns: the number of active machines (data sources) over time
(docs/workloads.md#btu-arrival-patterns).

A pattern is a pure function of the time since the run's start, shared by the simulator and the
live data provider. Three kinds exist:

* ``cycle``: a repeated sequence of levels, each held ``step_minutes`` (stepwise, two_level, ...).
* ``replay``: a column of the recorded walks in ``data/random_walk_machines.csv``, one row per
  ``step_minutes``. After the last row the **last value is held**, so a run longer than the table
  (200 min) still has a defined load instead of failing mid-run.
* ``random_walk``: a fresh walk from a seeded ``numpy.random.Generator`` with the paper's rule.

Times before the start (t < 0) give the first value.
"""
from __future__ import annotations

import functools
import importlib.resources
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import pandas as pd

from testbed.workloads.presps import RatePattern, SpikesConfig, validate_spikes
from testbed.workloads.presps import generate as generate_spikes

REPLAY_TABLE = "random_walk_machines.csv"


class PatternKind(str, Enum):
    cycle = "cycle"
    replay = "replay"
    random_walk = "random_walk"
    spikes = "spikes"  # events/s per second (PRESPS, testbed/workloads/presps.py)
    daedalus = "daedalus"  # items/s per second, 6 h (Daedalus, testbed/workloads/daedalus.py)


@dataclass
class PatternConfig:
    """Structured-config node ``pattern`` (defaults: the paper's stepwise pattern)."""

    name: str = "stepwise"
    kind: PatternKind = PatternKind.cycle
    levels: List[int] = field(default_factory=lambda: [2, 5, 8, 5])  # cycle
    step_minutes: float = 4.0
    column: str = ""  # replay: a column of the replay table
    start: int = 4  # random_walk
    min_machines: int = 1  # random_walk
    max_machines: int = 8  # random_walk
    p_down: float = 0.4  # random_walk: step -1 when R < p_down
    p_up: float = 0.6  # random_walk: step +1 when R > p_up
    seed_offset: int = 0  # random_walk: the caller derives the pattern's RNG stream from it
    spikes: SpikesConfig = field(default_factory=SpikesConfig)  # kind spikes
    workload: str = ""  # kind daedalus: a name of testbed.workloads.daedalus.WORKLOADS


class PatternError(ValueError):
    """An invalid pattern setting; ``key`` names the offending PatternConfig field."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


# --- replay table -----------------------------------------------------------------------------


@functools.cache
def _replay_table() -> pd.DataFrame:
    try:
        package = importlib.resources.files("testbed.workloads")
    except NotADirectoryError:
        # Python 3.11 fails on a stale setuptools editable install that still lists the package as
        # a namespace (fixed by `pip install -e .`); the files sit beside this module then.
        package = Path(__file__).parent
    with package.joinpath("data").joinpath(REPLAY_TABLE).open("r", encoding="utf-8") as fh:
        table = pd.read_csv(fh)
    # Rows are replayed by position, so the minutes must be exactly 0, 1, 2, ...
    if not np.array_equal(table["minute"].to_numpy(), np.arange(len(table))):
        raise ValueError(f"{REPLAY_TABLE}: column 'minute' must be 0, 1, 2, ... without gaps")
    return table


def load_replay_table() -> pd.DataFrame:
    """The packaged recorded walks (columns ``minute, random_walk_1, random_walk_2``); a copy."""
    return _replay_table().copy()


def replay_columns() -> List[str]:
    return [c for c in _replay_table().columns if c != "minute"]


# --- validation -------------------------------------------------------------------------------


def validate_pattern(cfg: PatternConfig) -> None:
    """Semantic checks a type cannot express. Raises PatternError naming the field."""
    if not cfg.name:
        raise PatternError("name", "must not be empty")
    if not cfg.step_minutes > 0:
        raise PatternError("step_minutes", f"must be > 0, got {cfg.step_minutes}")
    kind = PatternKind(cfg.kind)
    if kind is PatternKind.cycle:
        levels = list(cfg.levels)
        if not levels:
            raise PatternError("levels", "a cycle needs at least one level")
        if any(level < 0 for level in levels):
            raise PatternError("levels", f"levels must be >= 0, got {levels}")
    elif kind is PatternKind.daedalus:
        from testbed.workloads.daedalus import WORKLOADS

        if cfg.workload not in WORKLOADS:
            raise PatternError("workload",
                               f"unknown Daedalus workload {cfg.workload!r}; known: {', '.join(sorted(WORKLOADS))}")
    elif kind is PatternKind.spikes:
        try:
            validate_spikes(cfg.spikes)
        except ValueError as exc:
            raise PatternError(f"spikes.{str(exc).split(': ', 1)[0]}", str(exc).split(": ", 1)[-1]) from exc
    elif kind is PatternKind.replay:
        available = replay_columns()
        if cfg.column not in available:
            raise PatternError(
                "column", f"unknown replay column {cfg.column!r}; available: {', '.join(available)}"
            )
    else:
        if cfg.min_machines < 0:
            raise PatternError("min_machines", f"must be >= 0, got {cfg.min_machines}")
        if cfg.min_machines > cfg.max_machines:
            raise PatternError(
                "min_machines", f"{cfg.min_machines} exceeds max_machines ({cfg.max_machines})"
            )
        if not cfg.min_machines <= cfg.start <= cfg.max_machines:
            raise PatternError(
                "start", f"{cfg.start} is outside [{cfg.min_machines}, {cfg.max_machines}]"
            )
        for key in ("p_down", "p_up"):
            if not 0.0 <= getattr(cfg, key) <= 1.0:
                raise PatternError(key, f"must be in [0, 1], got {getattr(cfg, key)}")
        if cfg.p_down > cfg.p_up:
            raise PatternError("p_down", f"{cfg.p_down} exceeds p_up ({cfg.p_up})")


# --- patterns ---------------------------------------------------------------------------------


def _step_index(times_s: np.ndarray, step_s: float) -> np.ndarray:
    """Index of the step each time falls in; t < 0 counts as step 0."""
    t = np.maximum(np.asarray(times_s, dtype=float), 0.0)
    return np.floor(t / step_s).astype(np.int64)


class Pattern(ABC):
    """Number of active machines over time. ``series`` is the one implementation, so
    ``machines_at`` and ``series`` cannot disagree."""

    name: str
    step_s: float

    @abstractmethod
    def series(self, times_s: np.ndarray) -> np.ndarray:
        """Machines at each time (seconds since run start), as an int64 array."""

    def machines_at(self, t_s: float) -> int:
        return int(self.series(np.array([t_s], dtype=float))[0])


@dataclass(frozen=True)
class CyclePattern(Pattern):
    name: str
    levels: Tuple[int, ...]
    step_s: float

    def series(self, times_s: np.ndarray) -> np.ndarray:
        levels = np.asarray(self.levels, dtype=np.int64)
        return levels[_step_index(times_s, self.step_s) % len(levels)]


@dataclass(frozen=True)
class ReplayPattern(Pattern):
    name: str
    values: Tuple[int, ...] = field(repr=False)
    step_s: float

    def series(self, times_s: np.ndarray) -> np.ndarray:
        values = np.asarray(self.values, dtype=np.int64)
        return values[np.minimum(_step_index(times_s, self.step_s), len(values) - 1)]


@dataclass(frozen=True)
class RandomWalkPattern(Pattern):
    """A seeded walk, extended lazily in fixed blocks of draws.

    The pattern owns ``rng`` (do not share it). Draws are taken in blocks of ``BLOCK`` however the
    walk is queried, so the same seed gives the same walk for any query order.
    """

    name: str
    start: int
    min_machines: int
    max_machines: int
    p_down: float
    p_up: float
    step_s: float
    rng: np.random.Generator = field(repr=False, compare=False)
    _walk: List[int] = field(default_factory=list, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    BLOCK = 1024  # steps drawn at a time (not a field: no annotation)

    def _extend_to(self, n_steps: int) -> None:
        with self._lock:  # the live provider may query from several threads
            if not self._walk:
                self._walk.append(self.start)
            while len(self._walk) < n_steps:
                level = self._walk[-1]
                for r in self.rng.random(self.BLOCK):
                    if r < self.p_down:
                        level = max(level - 1, self.min_machines)
                    elif r > self.p_up:
                        level = min(level + 1, self.max_machines)
                    self._walk.append(level)

    def series(self, times_s: np.ndarray) -> np.ndarray:
        idx = _step_index(times_s, self.step_s)
        self._extend_to(int(idx.max()) + 1 if idx.size else 1)
        return np.asarray(self._walk, dtype=np.int64)[idx]


Pattern.register(RatePattern)  # a rate series is a pattern (its values are events/s, not machines)


def make_pattern(cfg: PatternConfig, rng: np.random.Generator | None = None) -> Pattern:
    """Build the pattern for a validated config. ``rng`` is needed only for ``random_walk``;
    derive it from the run seed and ``cfg.seed_offset`` so each pattern has its own stream."""
    validate_pattern(cfg)
    kind = PatternKind(cfg.kind)
    step_s = float(cfg.step_minutes) * 60.0
    if kind is PatternKind.cycle:
        return CyclePattern(cfg.name, tuple(int(v) for v in cfg.levels), step_s)
    if kind is PatternKind.replay:
        values = tuple(int(v) for v in _replay_table()[cfg.column])
        return ReplayPattern(cfg.name, values, step_s)
    if kind is PatternKind.daedalus:
        from testbed.workloads.daedalus import DaedalusPattern, rates

        if rng is None:
            raise ValueError(f"pattern {cfg.name!r} (a Daedalus workload) needs rng=numpy.random.Generator")
        # a Pattern by Pattern.register (mypy does not follow ABC.register)
        return DaedalusPattern(cfg.name, cfg.workload, rates(cfg.workload, rng))  # type: ignore[return-value]
    if kind is PatternKind.spikes:
        # RatePattern is a Pattern by Pattern.register, which mypy does not follow
        return RatePattern(cfg.name, tuple(int(v) for v in generate_spikes(cfg.spikes, rng)))  # type: ignore[return-value]
    if rng is None:
        raise ValueError(
            f"pattern {cfg.name!r} is a random_walk and needs rng=numpy.random.Generator "
            "(derived from the run seed and seed_offset)"
        )
    return RandomWalkPattern(
        cfg.name, int(cfg.start), int(cfg.min_machines), int(cfg.max_machines),
        float(cfg.p_down), float(cfg.p_up), step_s, rng,
    )


# --- plotting ---------------------------------------------------------------------------------


def plot_patterns(patterns: Sequence[Pattern], duration_s: float, path: str | Path) -> Path:
    """One PNG with a small step-plot panel per pattern (the paper's Fig. 7)."""
    import matplotlib

    matplotlib.use("Agg")  # headless and deterministic
    import matplotlib.pyplot as plt
    import seaborn as sns

    if not patterns:
        raise ValueError("plot_patterns needs at least one pattern")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    times = np.arange(0.0, duration_s + 1.0, 1.0)  # 1 s resolution catches every step change
    minutes = times / 60.0
    values = [p.series(times) for p in patterns]
    y_max = max(int(v.max()) for v in values)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(
            1, len(patterns), figsize=(3.0 * len(patterns), 2.4), sharey=True, squeeze=False
        )
        for ax, pattern, v in zip(axes[0], patterns, values, strict=False):
            ax.step(minutes, v, where="post", color=sns.color_palette()[0], linewidth=1.5)
            ax.set_title(pattern.name)
            ax.set_xlabel("time [min]")
            ax.set_xlim(0.0, duration_s / 60.0)
            ax.set_ylim(0, y_max + 1)
        axes[0][0].set_ylabel("machines")
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
        plt.close(fig)
    return path
