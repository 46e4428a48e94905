"""Workloads as patterns: the load over time, a pure function of the time since the run's start,
shared by the simulator and the live data provider (docs/workloads.md).

A workload kind is one registered dataclass (testbed/workloads/registry.py): its settings, their
checks and how it builds its `Pattern`. Built in: ``cycle`` (stepwise, two_level, constant),
``replay`` (the recorded walks), ``random_walk`` (a seeded walk), ``spikes`` (PRESPS, events/s),
``daedalus`` (the Daedalus workloads, items/s) and ``trace`` (a user's CSV or Parquet file).
`validate_pattern` and `make_pattern` dispatch through the registry; times before the start give the
first value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from testbed.workloads.cycle import CyclePattern
from testbed.workloads.random_walk import RandomWalkPattern
from testbed.workloads.registry import (
    Pattern,
    PatternConfig,
    PatternError,
    kind_settings,
    pattern_config,
    pattern_node,
    workload_kind,
    workload_kinds,
)
from testbed.workloads.replay import ReplayPattern, load_replay_table, replay_columns

__all__ = ["CyclePattern", "Pattern", "PatternConfig", "PatternError", "RandomWalkPattern", "ReplayPattern",
           "gives_rates", "kind_settings", "load_replay_table", "make_pattern", "pattern_config", "pattern_node",
           "plot_patterns", "replay_columns", "validate_pattern", "workload_kind", "workload_kinds"]


def validate_pattern(cfg: PatternConfig) -> PatternConfig:
    """The checks of the common keys, then the kind's own; PatternError naming the key. Returns the
    node as its kind's settings."""
    if not cfg.name:
        raise PatternError("name", "must not be empty")
    if not cfg.step_minutes > 0:
        raise PatternError("step_minutes", f"must be > 0, got {cfg.step_minutes}")
    settings = kind_settings(cfg)
    try:
        settings.validate()
    except ValueError as exc:  # "<field>: <message>"
        key, _, message = str(exc).partition(": ")
        raise PatternError(key, message) from exc
    return settings


def gives_rates(cfg: PatternConfig) -> bool:
    """Whether the kind's patterns carry items/s per second (what job mode replays)."""
    return workload_kind(cfg.kind).gives_rates


def make_pattern(cfg: PatternConfig, rng: np.random.Generator | None = None) -> Pattern:
    """Build the pattern of a config. ``rng`` is needed by the kinds that draw (random_walk, the
    generated spikes and Daedalus noise); derive it from the run seed and ``cfg.seed_offset`` so each
    pattern has its own stream."""
    return validate_pattern(cfg).build(rng)


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
