"""The Daedalus evaluation's workloads (docs/workloads.md#daedalus-workloads): six hours at 1 s, as
items per second.

* sines (the repository generator's formula, values truncated to int): `wc_sine`, `ks_sine`,
  `phoebe_sine`;
* envelopes of the traces that are not available offline, drawn piecewise-linearly through their
  published 10-min means (or 30-min points, `_coarse`): `ysb_avazu` (Avazu ad clicks, plus the
  knots (0, 0), the peak (11,921 s, 400,000) and the end (21,600 s, 18,283), then min-max scaled to
  [0, 400,000]) and `tm_two_spike` (the traffic-monitoring trace with its peak (16,438 s, 99,989));
* every series gets the catalogue's standard noise, a multiplicative AR(1) with φ = 0.9 and σ = 1 %,
  from the generator it is given (the experiment derives it from its seed).

The job simulator (testbed/sim/job.py) normalises rates to its workers' capacity: the peak is
0.9 × C(12). As a pattern (the workload kind `daedalus`, `Daedalus` below), the series is a rate per
second; `as_machines` turns it into machine counts for the OEE topology's provider.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from testbed.workloads.registry import Pattern, PatternConfig, register_workload

DURATION_S = 21_600
PHI, SIGMA = 0.9, 0.01

YSB_10MIN = (2_039, 24_552, 83_311, 88_472, 44_535, 49_779, 83_112, 113_639, 117_319, 119_915, 144_310, 201_850,
             256_164, 270_633, 221_743, 190_407, 194_274, 192_988, 269_465, 382_897, 373_030, 296_648, 225_553,
             217_417, 226_703, 219_397, 185_544, 153_698, 131_661, 106_688, 96_211, 91_737, 61_771, 40_195, 34_046,
             21_615)
YSB_30MIN = (0, 102_570, 64_600, 116_336, 232_851, 196_016, 210_994, 339_338, 223_647, 166_737, 97_440, 46_383,
             18_283)
TM_10MIN = (757, 666, 2_258, 2_406, 1_185, 857, 2_593, 4_589, 10_181, 23_914, 51_570, 70_587, 51_734, 28_015,
            14_907, 15_693, 15_302, 17_854, 21_907, 23_940, 22_965, 19_926, 24_566, 32_774, 52_522, 71_561, 81_059,
            95_725, 90_822, 84_737, 68_715, 40_151, 11_825, 11_463, 6_098, 4_654)
TM_30MIN = (1_986, 2_627, 1_680, 14_447, 69_114, 14_524, 22_385, 18_208, 40_583, 90_312, 79_666, 10_923, 3_681, 419)


def _sine(mean: float, amplitude: float, periods: int) -> Callable[[], np.ndarray]:
    def build() -> np.ndarray:
        t = np.arange(DURATION_S, dtype=float)
        return np.trunc(mean + amplitude * np.sin(2 * np.pi * periods * t / DURATION_S))
    return build


def _envelope(knots: Sequence[Tuple[float, float]]) -> np.ndarray:
    ks = sorted(knots)
    x = np.array([k[0] for k in ks], dtype=float)
    y = np.array([k[1] for k in ks], dtype=float)
    return np.interp(np.arange(DURATION_S, dtype=float), x, y)


def _bin_knots(means: Sequence[float], width_s: float) -> list:
    return [(width_s * (i + 0.5), float(v)) for i, v in enumerate(means)]


def _points(values: Sequence[float], step_s: float) -> list:
    return [(step_s * i, float(v)) for i, v in enumerate(values)]


def _ysb(coarse: bool) -> Callable[[], np.ndarray]:
    def build() -> np.ndarray:
        knots = _points(YSB_30MIN, 1800) if coarse else _bin_knots(YSB_10MIN, 600) + [(0.0, 0.0), (21_600.0, 18_283.0)]
        return _envelope([*knots, (11_921.0, 400_000.0)])
    return build


def _tm(coarse: bool) -> Callable[[], np.ndarray]:
    def build() -> np.ndarray:
        knots = _points(TM_30MIN, 1800) if coarse else _bin_knots(TM_10MIN, 600)
        return _envelope([*knots, (16_438.0, 99_989.0)])
    return build


@dataclass(frozen=True)
class WorkloadSpec:
    build: Callable[[], np.ndarray]
    minmax: Tuple[float, ...] = ()  # rescale_minmax(lo, hi) after the noise; () = none
    facts: str = ""


WORKLOADS: Dict[str, WorkloadSpec] = {
    "wc_sine": WorkloadSpec(_sine(22_500, 17_500, 2), facts="Flink WordCount: 5,000-40,000, 2 periods of 3 h"),
    "ks_sine": WorkloadSpec(_sine(77_500, 72_500, 2), facts="Kafka Streams WordCount: 5,000-150,000 (probable)"),
    "phoebe_sine": WorkloadSpec(_sine(35_000, 30_000, 3), facts="YSB vs Phoebe: 5,000-65,000, 3 periods (probable)"),
    "ysb_avazu": WorkloadSpec(_ysb(False), (0.0, 400_000.0), "YSB: Avazu envelope, 10-min means"),
    "ysb_avazu_coarse": WorkloadSpec(_ysb(True), (0.0, 400_000.0), "YSB: Avazu envelope, 30-min points"),
    "tm_two_spike": WorkloadSpec(_tm(False), facts="Traffic monitoring: two spikes, 10-min means"),
    "tm_two_spike_coarse": WorkloadSpec(_tm(True), facts="Traffic monitoring: two spikes, 30-min points"),
}


def ar1_noise(rng: np.random.Generator, n: int, phi: float = PHI, sigma: float = SIGMA) -> np.ndarray:
    """Stationary AR(1) with standard deviation sigma: e_0 ~ N(0, σ²), e_t = φ e_{t-1} + √(1-φ²) σ z_t."""
    z = rng.standard_normal(n)
    e = np.empty(n)
    e[0] = sigma * z[0]
    k = np.sqrt(1 - phi * phi) * sigma
    for i in range(1, n):
        e[i] = phi * e[i - 1] + k * z[i]
    return e


def rates(name: str, rng: np.random.Generator) -> np.ndarray:
    """The workload's items per second (float, ≥ 0), noise included."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown Daedalus workload {name!r}; known: {sorted(WORKLOADS)}")
    spec = WORKLOADS[name]
    r = spec.build() * (1.0 + ar1_noise(rng, DURATION_S))
    if spec.minmax:
        lo, hi = spec.minmax
        r = lo + (hi - lo) * (r - r.min()) / (r.max() - r.min())
    return np.maximum(r, 0.0)


def as_machines(r: np.ndarray, peak_machines: int) -> np.ndarray:
    """Machine counts for the OEE provider: the peak scaled to `peak_machines`, integers ≥ 1."""
    return np.maximum(1, np.rint(r / r.max() * peak_machines)).astype(np.int64)


@dataclass(frozen=True)
class DaedalusPattern(Pattern):
    """A Daedalus workload as a pattern: `rates` per second for the job simulator; `series` gives
    machine counts (as_machines) for the OEE topology."""

    name: str
    workload: str
    rates: np.ndarray = field(repr=False, compare=False)
    peak_machines: int = 8
    step_s: float = 1.0

    def series(self, times_s: np.ndarray) -> np.ndarray:
        m = as_machines(self.rates, self.peak_machines)
        idx = np.floor(np.maximum(np.asarray(times_s, dtype=float), 0.0)).astype(np.int64)
        return m[np.minimum(idx, len(m) - 1)]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.rates, dtype=np.float64).tobytes()).hexdigest()


@register_workload("daedalus")
@dataclass
class Daedalus(PatternConfig):
    """pattern.workload: a name of WORKLOADS (items/s per second, 6 h, with the catalogue's noise)."""

    kind: str = "daedalus"
    workload: str = ""

    gives_rates = True

    def validate(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload: unknown Daedalus workload {self.workload!r}; known: "
                             f"{', '.join(sorted(WORKLOADS))}")

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        if rng is None:
            raise ValueError(f"pattern {self.name!r} (a Daedalus workload) needs rng=numpy.random.Generator")
        return DaedalusPattern(self.name, self.workload, rates(self.workload, rng))
