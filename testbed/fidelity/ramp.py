"""The load ramp (docs/flink.md#the-load-ramp): one worker at a static parallelism of 1, the load
stepped through fractions of its capacity, latency per load band. The same ramp runs on a real
Flink TaskManager (benchmarks/flink_ramp.py) and on the simulator's job model (`simulate`), so the
two can be compared band by band, the knee below capacity and the backlog above it included.

Pure: the schedule, the per-band figures from per-interval series and the comparison; no clock."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from testbed.sim.job import reading_span


@dataclass(frozen=True)
class RampSpec:
    capacity: float = 27.6  # sentences/s of one TaskManager at its limit (docs/flink.md#cpu-mode-measured)
    fractions: Tuple[float, ...] = (0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4)
    band_s: float = 30.0
    warmup_s: float = 20.0  # at the first fraction before the first band; not counted (JIT, first buffers)
    settle_s: float = 5.0  # the first seconds of each band are not counted (the step's transient)

    def validate(self) -> None:
        if not self.capacity > 0 or not self.fractions or min(self.fractions) <= 0:
            raise ValueError("ramp: capacity and every fraction must be > 0")
        if not 0 <= self.settle_s < self.band_s or self.warmup_s < 0:
            raise ValueError("ramp: need 0 <= settle_s < band_s and warmup_s >= 0")

    @property
    def duration_s(self) -> float:
        return self.warmup_s + self.band_s * len(self.fractions)


def points(spec: RampSpec) -> List[Tuple[float, float]]:
    """The schedule (seconds since its start, sentences/s), ending with rate 0."""
    out = [(0.0, spec.fractions[0] * spec.capacity)] if spec.warmup_s > 0 else []
    for i, f in enumerate(spec.fractions):
        out.append((spec.warmup_s + i * spec.band_s, f * spec.capacity))
    return out + [(spec.duration_s, 0.0)]


def per_second_rates(spec: RampSpec) -> np.ndarray:
    """The schedule as one rate per whole second (the simulator's workload)."""
    pts = points(spec)
    t = np.arange(int(math.ceil(spec.duration_s)), dtype=float)
    starts = np.array([p[0] for p in pts])
    return np.array([pts[i][1] for i in np.searchsorted(starts, t, side="right") - 1])


def band_of(spec: RampSpec, t: float) -> Optional[int]:
    """The band whose counted part holds time t (seconds since the schedule's start), if any."""
    rel = t - spec.warmup_s
    if rel < 0 or rel >= spec.band_s * len(spec.fractions):
        return None
    i = int(rel // spec.band_s)
    return i if rel - i * spec.band_s >= spec.settle_s else None


@dataclass(frozen=True)
class Interval:
    """What one reading interval counted: its end (seconds since the schedule's start), the words
    counted, their latencies' sum, and (where read) the CPU reading and the true CPU share."""

    t: float
    words: float
    latency_sum_ms: float
    busy: float = math.nan  # the counting task's busy fraction: what the controllers read as CPU
    cpu_share: float = math.nan  # the TaskManager's CPU time / its limit (cgroup)
    dt: float = 1.0  # the interval's length, s


@dataclass(frozen=True)
class BandLatency:
    fraction: float
    mean_ms: float  # over every word counted in the band
    p95_ms: float  # of the per-interval mean latencies
    intervals: int


def band_latency(spec: RampSpec, rows: Sequence[Interval]) -> List[BandLatency]:
    """Latency per load band from per-interval rows (intervals outside the counted bands ignored)."""
    groups: Dict[int, List[Interval]] = {}
    for r in rows:
        b = band_of(spec, r.t)
        if b is not None and r.words > 0:
            groups.setdefault(b, []).append(r)
    out = []
    for b, f in enumerate(spec.fractions):
        g = groups.get(b, [])
        words = sum(r.words for r in g)
        mean = sum(r.latency_sum_ms for r in g) / words if words > 0 else math.nan
        p95 = float(np.percentile([r.latency_sum_ms / r.words for r in g], 95)) if g else math.nan
        out.append(BandLatency(f, mean, p95, len(g)))
    return out


def intervals_from_samples(done_s: Sequence[float], latency_ms: Sequence[float], step_s: float = 1.0) -> List[Interval]:
    """Per-interval rows from sampled items (when each was done, its latency): the simulator's side."""
    t = np.asarray(done_s, dtype=float)
    lat = np.asarray(latency_ms, dtype=float)
    if not len(t):
        return []
    idx = np.floor(t / step_s).astype(int)
    n = np.bincount(idx)
    s = np.bincount(idx, weights=lat)
    return [Interval((i + 1) * step_s, float(n[i]), float(s[i])) for i in range(len(n)) if n[i] > 0]


@dataclass(frozen=True)
class BandComparison:
    fraction: float
    sim_mean_ms: float
    flink_mean_ms: float  # the median over the Flink runs
    flink_range_ms: Tuple[float, float]
    sim_p95_ms: float
    flink_p95_ms: float

    @property
    def ratio(self) -> float:
        return self.sim_mean_ms / self.flink_mean_ms if self.flink_mean_ms > 0 else math.nan


def compare(sim: Sequence[BandLatency], flink_runs: Sequence[Sequence[BandLatency]]) -> List[BandComparison]:
    """Simulated latency per band against the median (and range) of the Flink runs'."""
    out = []
    for i, s in enumerate(sim):
        means = [run[i].mean_ms for run in flink_runs if not math.isnan(run[i].mean_ms)]
        p95s = [run[i].p95_ms for run in flink_runs if not math.isnan(run[i].p95_ms)]
        med = float(np.median(means)) if means else math.nan
        rng = (min(means), max(means)) if means else (math.nan, math.nan)
        out.append(BandComparison(s.fraction, s.mean_ms, med, rng, s.p95_ms,
                                  float(np.median(p95s)) if p95s else math.nan))
    return out


def within(rows: Sequence[BandComparison], tolerance: float = 0.3) -> bool:
    """Every band's simulated mean within the tolerance of Flink's median."""
    return all(abs(r.ratio - 1.0) <= tolerance for r in rows)


def table(rows: Sequence[BandComparison]) -> str:
    """A Markdown table of the comparison."""
    lines = ["| load | sim mean ms | Flink mean ms, median (range) | sim / Flink | sim p95 ms | Flink p95 ms |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r.flink_range_ms
        lines.append(f"| {r.fraction:.0%} | {r.sim_mean_ms:,.0f} | {r.flink_mean_ms:,.0f} ({lo:,.0f}–{hi:,.0f}) | "
                     f"×{r.ratio:.2f} | {r.sim_p95_ms:,.0f} | {r.flink_p95_ms:,.0f} |")
    return "\n".join(lines)


def overload_capacity(spec: RampSpec, rows: Sequence[Interval], words_per_item: float) -> float:
    """Items/s the worker carried in the counted parts of the bands above 100 % (a backlog throughout):
    the median of the intervals' rates; NaN without such intervals."""
    rates = [r.words / words_per_item / r.dt for r in rows
             if (b := band_of(spec, r.t)) is not None and spec.fractions[b] > 1.0 and r.dt > 0]
    return float(np.median(rates)) if rates else math.nan


@dataclass(frozen=True)
class ReadingFit:
    """A CPU reading against the truth: the shift (s) after which it tracks the truth best, and at
    that shift its mean difference (bias), the difference's sd and the mean absolute difference."""

    lag_s: float
    bias: float
    sd: float
    mae: float
    n: int


def reading_fit(reading: Sequence[float], truth: Sequence[float], step_s: float, max_lag_s: float) -> ReadingFit:
    """How `reading` (one value per step) follows `truth`: reading[i + k] against truth[i] for the k
    of least mean absolute difference; NaNs left out."""
    best: Optional[ReadingFit] = None
    r, u = np.asarray(reading, dtype=float), np.asarray(truth, dtype=float)
    for k in range(int(max_lag_s / step_s) + 1):
        d = r[k:] - u[: len(u) - k]
        d = d[~np.isnan(d)]
        if len(d) < 10:
            break
        fit = ReadingFit(k * step_s, float(d.mean()), float(d.std(ddof=1)), float(np.abs(d).mean()), len(d))
        if best is None or fit.mae < best.mae:
            best = fit
    if best is None:
        raise ValueError("reading_fit: fewer than 10 pairs")
    return best


@dataclass(frozen=True)
class CgroupFit:
    """The TaskManager cgroup's CPU / limit against the utilisation u (throughput / capacity) below
    capacity, as overhead + (1 - overhead) u (a worker at capacity reads 1): the least-squares
    overhead, the residuals' mean and sd, and the intervals used."""

    overhead: float
    mean: float
    sd: float
    n: int


def cgroup_fit(spec: RampSpec, rows: Sequence[Interval], capacity: float, words_per_item: float,
               below: float = 0.95) -> CgroupFit:
    """The job model's cgroup reading (`job.cgroup_overhead`) fitted to a ramp's intervals after its
    warm-up whose utilisation is under `below` (above it the quota, not the load, sets the CPU)."""
    pairs = [(r.words / words_per_item / r.dt / capacity, r.cpu_share) for r in rows
             if r.t > spec.warmup_s and r.dt > 0 and math.isfinite(r.cpu_share)]
    kept = np.array([p for p in pairs if p[0] < below], dtype=float).reshape(-1, 2)
    if len(kept) < 10:
        raise ValueError("cgroup_fit: fewer than 10 intervals below capacity with a cgroup reading")
    u, share = kept[:, 0], kept[:, 1]
    x = 1.0 - u
    overhead = float((x * (share - u)).sum() / (x * x).sum())
    resid = share - (overhead + (1.0 - overhead) * u)
    return CgroupFit(overhead, float(resid.mean()), float(resid.std(ddof=1)), len(u))


def windowed(values: Sequence[float], lag: int, window: int, update: int) -> np.ndarray:
    """A per-second series as a windowed metric reads it (testbed/sim/job.py `reading_span`); NaN
    before its first update."""
    v = np.asarray(values, dtype=float)
    out = np.full(len(v), np.nan)
    for t in range(len(v)):
        lo, hi = reading_span(t, lag, window, update)
        if hi > lo:
            out[t] = np.nanmean(v[lo:hi])
    return out


def per_second(t: Sequence[float], values: Sequence[float], seconds: int) -> np.ndarray:
    """Irregular readings (times, values) on a grid of whole seconds 0..seconds-1 (linear)."""
    return np.interp(np.arange(seconds, dtype=float), np.asarray(t, dtype=float), np.asarray(values, dtype=float))


@dataclass
class RampRun:
    """One ramp's measured series and its figures (a Flink run's JSON, or the simulator's)."""

    spec: RampSpec
    intervals: List[Interval] = field(default_factory=list)
    meta: Dict[str, Any] = field(default_factory=dict)

    def bands(self) -> List[BandLatency]:
        return band_latency(self.spec, self.intervals)
