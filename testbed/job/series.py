"""The per-second series of a job-mode run: one row per run second (row k ends at k + 1), kept in
arrays that grow by doubling, so a window and the tables read them without copying lists."""
from __future__ import annotations

from typing import List

import numpy as np

from testbed.job.engine import Second


class JobSeries:
    def __init__(self, top: int, capacity: int = 64) -> None:
        self.top = top
        self.size = 0
        cap = max(1, capacity)
        self._arrivals = np.zeros(cap)
        self._thr = np.zeros((cap, top))
        self._cpu = np.full((cap, top), np.nan)
        self._lag = np.zeros(cap)
        self._uptime = np.zeros(cap)
        self._parallel = np.zeros(cap, dtype=np.int64)
        self._running = np.zeros(cap, dtype=np.int64)
        self.lat_t: List[float] = []
        self.lat_ms: List[float] = []

    def __len__(self) -> int:
        return self.size

    def append(self, s: Second) -> None:
        if self.size == len(self._lag):
            self._grow()
        k = self.size
        self._arrivals[k] = s.arrivals
        self._thr[k] = s.thr
        self._cpu[k] = s.cpu
        self._lag[k] = s.lag
        self._uptime[k] = s.uptime
        self._parallel[k] = s.parallel
        self._running[k] = s.running
        self.size += 1

    def _grow(self) -> None:
        cap = 2 * len(self._lag)
        for name in ("_arrivals", "_thr", "_cpu", "_lag", "_uptime", "_parallel", "_running"):
            old = getattr(self, name)
            new = np.full((cap, *old.shape[1:]), np.nan if name == "_cpu" else 0, dtype=old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)

    # views of the rows so far (not copies: a caller that keeps one copies it)
    @property
    def arrivals(self) -> np.ndarray:
        return self._arrivals[:self.size]

    @property
    def thr(self) -> np.ndarray:
        return self._thr[:self.size]

    @property
    def cpu(self) -> np.ndarray:
        return self._cpu[:self.size]

    @property
    def lag(self) -> np.ndarray:
        return self._lag[:self.size]

    @property
    def uptime(self) -> np.ndarray:
        return self._uptime[:self.size]

    @property
    def parallel(self) -> np.ndarray:
        return self._parallel[:self.size]

    @property
    def running(self) -> np.ndarray:
        return self._running[:self.size]
