"""Daedalus' capacity model (docs/papers/daedalus.md#capacity-model): a per-worker linear regression
of throughput on CPU (Welford), the skew rule that evaluates every worker at its share of the
busiest worker's CPU, and the bookkeeping of observed and estimated capacity per scale-out.

Pure: no I/O, no clock; every state is a plain dataclass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Mapping, Sequence


class WelfordMode(str, Enum):
    exact = "exact"  # one sample at a time (paper; default)
    batch_code = "batch_code"  # the public code's update of a whole window at once


class SkewRule(str, Enum):
    proportional = "proportional"  # x_w = cpu_w / cpu_max (paper; default)
    offset = "offset"  # x_w = 1 - (cpu_max - cpu_w) (code)


@dataclass
class Regression:
    """Throughput Y on CPU X with population moments: n, means, var(X), cov(X, Y)."""

    n: int = 0
    mx: float = 0.0
    my: float = 0.0
    var: float = 0.0
    cov: float = 0.0

    def add(self, x: float, y: float) -> None:
        """Exact Welford: Sxx += dx (x - mX_new), Sxy += dx (y - mY_new); var = Sxx/n, cov = Sxy/n."""
        n_old = self.n
        self.n += 1
        n = self.n
        dx = x - self.mx
        self.mx += dx / n
        dy = y - self.my
        self.my += dy / n
        self.var = (self.var * n_old + dx * (x - self.mx)) / n
        self.cov = (self.cov * n_old + dx * (y - self.my)) / n

    def add_all(self, xs: Sequence[float], ys: Sequence[float], mode: WelfordMode = WelfordMode.exact) -> None:
        if len(xs) != len(ys):
            raise ValueError(f"{len(xs)} CPU samples but {len(ys)} throughput samples")
        if not len(xs):
            return
        if WelfordMode(mode) is WelfordMode.exact:
            for x, y in zip(xs, ys, strict=True):
                self.add(float(x), float(y))
            return
        # the code's batch form: one n for the whole window, deviations from the old means
        k = len(xs)
        self.n += k
        n = self.n
        dx = [float(x) - self.mx for x in xs]
        dy = [float(y) - self.my for y in ys]
        f = (n - 1) / n
        self.var += (sum(f * d * d for d in dx) - k * self.var) / n
        self.cov += (sum(f * a * b for a, b in zip(dx, dy, strict=True)) - k * self.cov) / n
        self.mx += sum(dx) / n
        self.my += sum(dy) / n

    @property
    def beta(self) -> float:
        """cov/var; with no spread in X (var 0) the ratio through the origin my/mx (Decision)."""
        if self.var > 0:
            return self.cov / self.var
        return self.my / self.mx if self.mx > 0 else 0.0

    @property
    def alpha(self) -> float:
        return self.my - self.beta * self.mx if self.var > 0 else 0.0

    def capacity(self, x: float) -> float:
        return self.alpha + self.beta * x


def skew_inputs(cpu: Mapping[str, float], rule: SkewRule = SkewRule.proportional) -> Dict[str, float]:
    """The CPU each worker is evaluated at: the busiest worker at 1, the others by the skew rule."""
    if not cpu:
        return {}
    top = max(cpu.values())
    if SkewRule(rule) is SkewRule.offset:
        return {w: 1.0 - (top - c) for w, c in cpu.items()}
    if top <= 0:
        return {w: 1.0 for w in cpu}  # nobody busy: no skew can be seen (Decision)
    return {w: c / top for w, c in cpu.items()}


@dataclass
class CapacityModel:
    """Regressions per worker identity and C(p) for p = 1..max_scaleout."""

    max_scaleout: int = 18
    welford: WelfordMode = WelfordMode.exact
    skew_rule: SkewRule = SkewRule.proportional
    models: Dict[str, Regression] = field(default_factory=dict)
    observed: Dict[int, int] = field(default_factory=dict)
    estimated: Dict[int, int] = field(default_factory=dict)
    current: int = 0  # C_cur of the latest update

    def update(self, cpu: Mapping[str, Sequence[float]], throughput: Mapping[str, Sequence[float]],
               p_cur: int) -> int:
        """One loop: feed each worker's window into its regression, forget workers that are gone,
        evaluate every worker under the skew rule, book C_cur as observed at p_cur and rescale it
        to every other scale-out. Returns C_cur (0 if no worker had samples)."""
        for gone in set(self.models) - set(cpu):
            del self.models[gone]
        means: Dict[str, float] = {}
        for w, xs in cpu.items():
            ys = throughput[w]
            if not len(xs):
                continue
            self.models.setdefault(w, Regression()).add_all(xs, ys, self.welford)
            means[w] = sum(float(x) for x in xs) / len(xs)
        if not means or p_cur <= 0:
            return 0
        x = skew_inputs(means, self.skew_rule)
        c_cur = sum(int(self.models[w].capacity(x[w])) for w in means)
        self.current = c_cur
        old = self.observed.get(p_cur, 0)
        self.observed[p_cur] = c_cur if old == 0 else int((old + c_cur) / 2)
        self.estimated = {p: int(p * c_cur / p_cur) for p in range(1, self.max_scaleout + 1)}
        return c_cur

    def capacity(self, p: int) -> int:
        """C(p): observed if known, else estimated; 0 for p = 0 or before the first update."""
        if p <= 0:
            return 0
        seen = self.observed.get(p, 0)
        return seen if seen != 0 else self.estimated.get(p, 0)
