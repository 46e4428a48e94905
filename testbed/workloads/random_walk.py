"""Kind `random_walk`: a fresh walk from a seeded ``numpy.random.Generator`` with the BTU paper's rule
(start 4, -1 when R < p_down, +1 when R > p_up, within [min_machines, max_machines], one step per
`step_minutes`; docs/workloads.md#random_walk)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from testbed.workloads.registry import Pattern, PatternConfig, register_workload, step_index


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
        idx = step_index(times_s, self.step_s)
        self._extend_to(int(idx.max()) + 1 if idx.size else 1)
        return np.asarray(self._walk, dtype=np.int64)[idx]


@register_workload("random_walk")
@dataclass
class RandomWalk(PatternConfig):
    """The walk's rule: pattern.start, min_machines, max_machines, p_down, p_up."""

    kind: str = "random_walk"
    start: int = 4
    min_machines: int = 1
    max_machines: int = 8
    p_down: float = 0.4  # step -1 when R < p_down
    p_up: float = 0.6  # step +1 when R > p_up

    def validate(self) -> None:
        if self.min_machines < 0:
            raise ValueError(f"min_machines: must be >= 0, got {self.min_machines}")
        if self.min_machines > self.max_machines:
            raise ValueError(f"min_machines: {self.min_machines} exceeds max_machines ({self.max_machines})")
        if not self.min_machines <= self.start <= self.max_machines:
            raise ValueError(f"start: {self.start} is outside [{self.min_machines}, {self.max_machines}]")
        for key in ("p_down", "p_up"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"{key}: must be in [0, 1], got {getattr(self, key)}")
        if self.p_down > self.p_up:
            raise ValueError(f"p_down: {self.p_down} exceeds p_up ({self.p_up})")

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        if rng is None:
            raise ValueError(f"pattern {self.name!r} is a random_walk and needs rng=numpy.random.Generator "
                             "(derived from the run seed and seed_offset)")
        return RandomWalkPattern(self.name, int(self.start), int(self.min_machines), int(self.max_machines),
                                 float(self.p_down), float(self.p_up), float(self.step_minutes) * 60.0, rng)
