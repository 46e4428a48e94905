"""Kind `replay`: a column of the recorded walks in ``data/random_walk_machines.csv``, one row per
`step_minutes` (random_walk_1, random_walk_2; docs/workloads.md#random_walk_1-and-random_walk_2).
After the last row the **last value is held**, so a run longer than the table (200 min) still has a
defined load instead of failing mid-run."""
from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from testbed.workloads.registry import Pattern, PatternConfig, register_workload, step_index

REPLAY_TABLE = "random_walk_machines.csv"


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


@dataclass(frozen=True)
class ReplayPattern(Pattern):
    name: str
    values: Tuple[int, ...] = field(repr=False)
    step_s: float

    def series(self, times_s: np.ndarray) -> np.ndarray:
        values = np.asarray(self.values, dtype=np.int64)
        return values[np.minimum(step_index(times_s, self.step_s), len(values) - 1)]


@register_workload("replay")
@dataclass
class Replay(PatternConfig):
    """pattern.column: a column of the packaged replay table."""

    kind: str = "replay"
    column: str = ""

    def validate(self) -> None:
        available = replay_columns()
        if self.column not in available:
            raise ValueError(f"column: unknown replay column {self.column!r}; available: {', '.join(available)}")

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        values = tuple(int(v) for v in _replay_table()[self.column])
        return ReplayPattern(self.name, values, float(self.step_minutes) * 60.0)
