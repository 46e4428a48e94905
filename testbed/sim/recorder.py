"""Duration sampling and measurement, shared by the cohort and the exact network models."""
from __future__ import annotations

import math
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
        self._noise = [self._noise_buffer(stream(seed, f"service/{o}"), cv) for o, cv in zip(operators, cvs)]
        self._rr = [0] * len(operators)
        self._truncate = measurement == Measurement.seconds_truncated
        self._epoch = float(stream(seed, "clock-phase").uniform(0.0, 1.0))  # wall-clock phase of the start
        if self._geometric:
            self._gap = [int(self._gaps.next()) for _ in operators]
        self._sum_ms = [0.0] * len(operators)  # since the last monitoring read
        self._n = [0] * len(operators)
        self.t: List[float] = []
        self.operator: List[str] = []
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
        self.operator.append(self.operators[op])
        self.instance.append(instances[k % len(instances)] if instances else "")
        d = (finish - send) * 1000.0
        self.duration_ms.append(d)
        self._sum_ms[op] += d
        self._n[op] += 1

    def interval_means(self) -> List[float | None]:
        """Mean sampled duration per operator since the previous call (None: no sample)."""
        means = [s / n if n else None for s, n in zip(self._sum_ms, self._n)]
        self._sum_ms = [0.0] * len(self._n)
        self._n = [0] * len(self._n)
        return means

    def __len__(self) -> int:
        return len(self.t)
