"""Observed recovery time by anomaly detection (docs/papers/daedalus.md#observed-recovery-time):
diff = workload − total throughput at 1 s; a sample is anomalous when it lies more than one
standard deviation from the running mean of all diffs; gaps up to 30 s are bridged (rolling maximum
over 31 samples) and the observed RT is the mean length of the anomaly groups − 30."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import numpy as np

BRIDGE_S = 30


@dataclass
class RunningStats:
    """Welford mean and population standard deviation of every diff seen."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add_all(self, values: Union[Sequence[float], np.ndarray]) -> None:
        for v in values:
            self.n += 1
            d = float(v) - self.mean
            self.mean += d / self.n
            self.m2 += d * (float(v) - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.n) if self.n else 0.0


def anomalous(diffs: Sequence[float], mean: float, std: float) -> np.ndarray:
    return np.abs(np.asarray(diffs, dtype=float) - mean) > std


def bridged(flags: np.ndarray, gap: int = BRIDGE_S) -> np.ndarray:
    """Trailing rolling maximum over gap + 1 samples: an anomaly extends `gap` samples forward."""
    out = np.zeros(len(flags), dtype=bool)
    last = -10**9
    for i, f in enumerate(flags):
        if f:
            last = i
        out[i] = i - last <= gap
    return out


def group_lengths(flags: np.ndarray) -> List[int]:
    lengths, run = [], 0
    for f in flags:
        if f:
            run += 1
        elif run:
            lengths.append(run)
            run = 0
    if run:
        lengths.append(run)
    return lengths


def observed_recovery(diffs: Sequence[float], mean: float, std: float, gap: int = BRIDGE_S) -> Optional[float]:
    """Mean anomaly-group length − gap over the series (None: no anomaly)."""
    groups = group_lengths(bridged(anomalous(diffs, mean, std), gap))
    if not groups:
        return None
    return float(np.mean(groups)) - gap


def recovery_end(diffs: Sequence[float], mean: float, std: float, start: int = 30, every: int = 5) -> Optional[int]:
    """Index at which the monitor (first check `start` samples after the rescale, then every `every`)
    finds the newest sample normal; None if it has not happened within the series."""
    flags = anomalous(diffs, mean, std)
    for i in range(start, len(flags), every):
        if not flags[i]:
            return i
    return None
