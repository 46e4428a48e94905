"""Duration sampling and measurement, shared by the cohort and the exact network models."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from testbed.config import Measurement, Sampling
from testbed.rng import DrawBuffer, stream


class SampleRecorder:
    """Chooses which processed items are sampled and records their measured durations.

    Every `every`-th item of an operator type is sampled (or, VISP-style, each with probability
    1/every: geometric gaps). A sampled item's service time is the mean times a gamma draw with the
    operator's coefficient of variation. The measured duration runs from the upstream send to the
    end of processing; `seconds_truncated` measures from the send time cut to whole seconds of the
    wall clock, as AMQP timestamps did in the original system.
    """

    def __init__(self, operators: Sequence[str], cvs: Sequence[float], every: int, sampling: Sampling,
                 measurement: Measurement, seed: int):
        self.operators = list(operators)
        self.every = every
        self._gap = [every - 1] * len(operators)  # items to skip before the next sample
        self._geometric = sampling == Sampling.probabilistic
        p = 1.0 / every
        gaps = stream(seed, "sampling")
        self._gaps = DrawBuffer(lambda n: gaps.geometric(p, n) - 1)
        self._noise = [self._noise_buffer(stream(seed, f"service/{o}"), cv)
                       for o, cv in zip(operators, cvs, strict=True)]
        self._rr = [0] * len(operators)
        self._truncate = measurement == Measurement.seconds_truncated
        self._epoch = float(stream(seed, "clock-phase").uniform(0.0, 1.0))  # wall-clock phase of the start
        if self._geometric:
            self._gap = [int(self._gaps.next()) for _ in operators]
        self._names = np.array(self.operators, dtype=object)
        self._interval_start = 0  # first sample since the last monitoring read
        self.t: List[float] = []
        self._op: List[int] = []  # the operator's index; `operator` gives the names
        self.instance: List[str] = []
        self.duration_ms: List[float] = []

    @staticmethod
    def _noise_buffer(rng: np.random.Generator, cv: float) -> DrawBuffer:
        if cv <= 0:
            return DrawBuffer(lambda n: np.ones(n))
        shape = 1.0 / (cv * cv)
        return DrawBuffer(lambda n: rng.gamma(shape, 1.0 / shape, n))

    def take(self, op: int, count: int) -> List[int]:
        """Positions (0-based) of the sampled items among the next `count` processed items."""
        j = self._gap[op]
        if j >= count:
            self._gap[op] = j - count
            return []
        picked = []
        if self._geometric:
            while j < count:
                picked.append(j)
                j += 1 + int(self._gaps.next())
        else:
            picked = list(range(j, count, self.every))
            j = picked[-1] + self.every
        self._gap[op] = j - count
        return picked

    def service(self, op: int, mean_s: float) -> float:
        return mean_s * self._noise[op].next()

    def record_finished(self, op: int, instances: Sequence[str], send: float, finish: float) -> None:
        if self._truncate:
            send = math.floor(send + self._epoch) - self._epoch
        k = self._rr[op]
        self._rr[op] = k + 1
        self.t.append(finish)
        self._op.append(op)
        self.instance.append(instances[k % len(instances)] if instances else "")
        self.duration_ms.append((finish - send) * 1000.0)

    def extend(self, t: List[float], op: np.ndarray, instance: List[str], duration_ms: List[float]) -> None:
        """Samples the compiled cohort model took and measured (see `arrays`); `op`: operator indices."""
        self.t += t
        self._op += op.tolist()
        self.instance += instance
        self.duration_ms += duration_ms

    @property
    def operator(self) -> List[str]:
        """Each sample's operator name (the samples table's column)."""
        return self._names[np.asarray(self._op, dtype=np.int64)].tolist()

    def interval_means(self) -> List[float | None]:
        """Mean sampled duration per operator since the previous call (None: no sample); summed in
        the order the samples were taken."""
        start, self._interval_start = self._interval_start, len(self.t)
        op, n = np.array(self._op[start:], dtype=np.int64), len(self.operators)
        # bincount adds the weights one by one in order, as a loop over the samples would
        sums = np.bincount(op, weights=np.array(self.duration_ms[start:], dtype=np.float64), minlength=n).tolist()
        counts = np.bincount(op, minlength=n).tolist()
        return [s / c if c else None for s, c in zip(sums, counts, strict=True)]

    def arrays(self) -> "SamplingArrays":
        """Hands the sampling state over to the compiled cohort model, which samples by the same
        rules from the same draws and `extend`s the columns; `take`, `service` and
        `record_finished` must not be used afterwards."""
        state = SamplingArrays(
            every=self.every, geometric=self._geometric, truncate=self._truncate, epoch=self._epoch,
            gap=np.array(self._gap, dtype=np.int64), rr=np.array(self._rr, dtype=np.int64),
            gaps=self._gaps, noise=self._noise,
        )
        self._gap = self._rr = None  # type: ignore[assignment]
        return state

    def __len__(self) -> int:
        return len(self.t)


@dataclass
class SamplingArrays:
    """A recorder's sampling state for the compiled cohort model (testbed/sim/network.py)."""

    every: int
    geometric: bool  # gaps drawn from `gaps` (else every `every`-th item)
    truncate: bool  # seconds-truncated send times
    epoch: float  # wall-clock phase of the run's start
    gap: np.ndarray  # per operator: items to skip before its next sample
    rr: np.ndarray  # per operator: samples so far (their instance goes round)
    gaps: DrawBuffer  # geometric gaps (int64)
    noise: List[DrawBuffer]  # per operator: service-time factors
