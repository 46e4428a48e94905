"""Kind `cycle`: a repeated sequence of levels (machines), each held `step_minutes` (stepwise, two_level,
constant; docs/workloads.md#btu-arrival-patterns). Times before the start give the first level."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from testbed.workloads.registry import Pattern, PatternConfig, register_workload, step_index


@dataclass(frozen=True)
class CyclePattern(Pattern):
    name: str
    levels: Tuple[int, ...]
    step_s: float

    def series(self, times_s: np.ndarray) -> np.ndarray:
        levels = np.asarray(self.levels, dtype=np.int64)
        return levels[step_index(times_s, self.step_s) % len(levels)]


@register_workload("cycle")
@dataclass
class Cycle(PatternConfig):
    """pattern.levels: the machines of each step, repeated (defaults: the paper's stepwise pattern)."""

    kind: str = "cycle"
    levels: List[int] = field(default_factory=lambda: [2, 5, 8, 5])

    def validate(self) -> None:
        levels = list(self.levels)
        if not levels:
            raise ValueError("levels: a cycle needs at least one level")
        if any(level < 0 for level in levels):
            raise ValueError(f"levels: levels must be >= 0, got {levels}")

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        return CyclePattern(self.name, tuple(int(v) for v in self.levels), float(self.step_minutes) * 60.0)
