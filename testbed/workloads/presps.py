"""The PRESPS workload: per-second event rates with traffic spikes (docs/papers/presps.md#workload).

The PRESPS authors built their input trace with the spike model of Bodík et al. (SoCC 2010): a spike
is an onset, a ramp-up, a plateau at the peak and a ramp-down. The trace itself is not shipped
(no licence); this module generates series of the same character, calibrated to the trace's
published statistics (length 1301 s, min 315, max 5751, mean 2292.7 events/s):

* profile ``paper_like``: a piecewise-linear envelope through the knots of the reference's three
  rising waves;
* profile ``random``: W seeded waves (the last peak is the highest, earlier ones 0.6-0.8 of it);
* profile ``file``: replay of a user-supplied CSV, one count per second (e.g. a local copy of the
  reference trace); nothing is shipped.

Generated envelopes get multiplicative AR(1) noise (phi 0.9, stationary sd 1 %), then the
calibration ``r = lo + (hi - lo) * u**kappa`` with u the envelope min-max scaled to [0, 1] and kappa
found by bisection so that the mean is the target mean: min, max and mean are exact (the counts are
rounded to integers by largest remainder, which keeps the total). ``peak`` rescales the result (the
live scale, 40 events/s).

A rate series is used as a pattern (the workload kind ``spikes``, `Spikes` below): the "machines"
value at time t is the rate of second ⌊t⌋, and a topology with one source of one item per 1 s tick
emits exactly that many events in that second.
"""
from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from testbed.workloads.registry import Pattern, PatternConfig, register_workload

# The reference's knots (workloads.md §3.2): (second, events/s).
PAPER_LIKE_KNOTS: Tuple[Tuple[float, float], ...] = (
    (0, 315), (144, 3758), (180, 3758), (303, 1094), (331, 1103), (473, 4113), (509, 4113),
    (691, 765), (699, 770), (859, 5751), (895, 5751), (1080, 905), (1088, 905), (1120, 315), (1300, 400),
)
# The reference trace's statistics, for the report's side-by-side view.
REFERENCE_STATS = {"length_s": 1301, "min": 315, "max": 5751, "mean": 2292.7, "sd": 1532.0, "diff_sd": 30.0,
                   "diff_max": 387.0}
REFERENCE_MINUTE_MEANS: Tuple[float, ...] = (828, 2445, 3659, 3237, 1889, 1219, 1978, 3559, 3972, 2823, 1483, 874,
                                             1570, 3916, 5648, 4783, 2762, 1476, 550, 378, 392, 400)
PROFILES = ("paper_like", "random", "file")


@dataclass
class SpikesConfig:
    """pattern.spikes: the spike generator's settings (defaults: the reference trace's statistics)."""

    profile: str = "paper_like"  # paper_like | random | file
    file: str = ""  # profile file: a CSV with one count per second (column `rate`, else the last column)
    length_s: int = 1301
    lo: float = 315.0
    hi: float = 5751.0
    mean: float = 2292.7  # target mean; 0 = no calibration of the mean (kappa = 1)
    waves: int = 3  # profile random
    noise_phi: float = 0.9  # AR(1) noise; noise_sd 0 = none
    noise_sd: float = 0.01
    texture: bool = False  # a sawtooth (amplitude ~110, period 8 s) on the tail after the last wave
    peak: float = 0.0  # > 0: rescale so that the maximum is `peak` (e.g. 40 for the live scale)

    def validate(self) -> None:
        validate_spikes(self)


def validate_spikes(self) -> None:
    """ValueError("<field>: message") on a bad setting of a SpikesConfig (or a config node of it)."""
    if self.profile not in PROFILES:
        raise ValueError(f"profile: {self.profile!r} is none of {', '.join(PROFILES)}")
    if self.profile == "file":
        if not self.file:
            raise ValueError("file: profile file needs a CSV path")
        if not Path(self.file).is_file():
            raise ValueError(f"file: no such file {self.file!r}")
        return
    if self.length_s < 2:
        raise ValueError(f"length_s: must be >= 2, got {self.length_s}")
    if not 0 <= self.lo < self.hi:
        raise ValueError(f"lo: must satisfy 0 <= lo < hi ({self.hi:g}), got {self.lo:g}")
    if self.mean and not self.lo < self.mean < self.hi:
        raise ValueError(f"mean: must lie strictly between lo and hi, got {self.mean:g}")
    if self.waves < 1:
        raise ValueError(f"waves: must be >= 1, got {self.waves}")
    if not 0 <= self.noise_phi < 1:
        raise ValueError(f"noise_phi: must be in [0, 1), got {self.noise_phi:g}")
    if not 0 <= self.noise_sd < 0.5:
        raise ValueError(f"noise_sd: must be in [0, 0.5), got {self.noise_sd:g}")
    if self.peak < 0:
        raise ValueError(f"peak: must be >= 0, got {self.peak:g}")


def envelope(knots: Sequence[Tuple[float, float]], length_s: int) -> np.ndarray:
    """The piecewise-linear envelope through the knots at t = 0 .. length_s - 1 (held after the last)."""
    t = np.arange(length_s, dtype=float)
    xs, ys = zip(*knots, strict=True)
    return np.interp(t, np.asarray(xs, dtype=float), np.asarray(ys, dtype=float))


def random_knots(rng: np.random.Generator, waves: int, length_s: int, base: float = 0.055) -> List[Tuple[float, float]]:
    """Knots of W seeded waves in relative units (the highest peak 1): ramp-up U(120,180) s, plateau
    U(20,50) s, ramp-down U(120,200) s to a trough U(0.12,0.30); earlier peaks U(0.6,0.8) ascending;
    after the last wave a fall to `base`, held to the end. Compressed in time if they do not fit."""
    peaks = sorted(rng.uniform(0.6, 0.8, waves - 1).tolist()) + [1.0]
    parts: List[Tuple[float, float]] = []  # (duration, level reached)
    for i, p in enumerate(peaks):
        parts.append((rng.uniform(120, 180), p))
        parts.append((rng.uniform(20, 50), p))
        last = i == waves - 1
        parts.append((rng.uniform(120, 200), base if last else rng.uniform(0.12, 0.30)))
    total = sum(d for d, _ in parts)
    room = 0.9 * (length_s - 1)  # leave a tail
    scale = min(1.0, room / total)
    knots, t = [(0.0, base)], 0.0
    for d, level in parts:
        t += d * scale
        knots.append((t, level))
    knots.append((float(length_s - 1), base))
    return knots


def ar1_noise(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """AR(1) noise with stationary standard deviation `sd` (innovations sd·sqrt(1 - phi²))."""
    if sd <= 0:
        return np.zeros(n)
    eps = rng.normal(0.0, sd * np.sqrt(1.0 - phi * phi), n)
    out = np.empty(n)
    x = rng.normal(0.0, sd)
    for i in range(n):
        x = phi * x + eps[i]
        out[i] = x
    return out


def calibrate(e: np.ndarray, lo: float, hi: float, mean: float) -> Tuple[np.ndarray, float]:
    """r = lo + (hi - lo)·u^kappa with u = e min-max scaled; kappa by bisection so that mean(r) =
    mean (kappa = 1 with mean 0). Returns (r, kappa)."""
    span = float(e.max() - e.min())
    u = (e - e.min()) / span if span > 0 else np.zeros_like(e)
    if not mean:
        return lo + (hi - lo) * u, 1.0
    target = (mean - lo) / (hi - lo)
    a, b = 1e-3, 1e3  # mean(u**k) falls as k grows
    for _ in range(200):
        k = float(np.sqrt(a * b))
        if float(np.mean(u ** k)) > target:
            a = k
        else:
            b = k
    k = float(np.sqrt(a * b))
    return lo + (hi - lo) * u ** k, k


def integer_counts(r: np.ndarray) -> np.ndarray:
    """Round to integers keeping the total (largest remainder): floor, then +1 where the fractions
    are largest, as many times as the fractions add up to."""
    floor = np.floor(r)
    extra = int(round(float(r.sum() - floor.sum())))
    frac = r - floor
    order = np.argsort(-frac, kind="stable")[:extra]
    out = floor.astype(np.int64)
    out[order] += 1
    return out


def read_rate_file(path: str | Path) -> np.ndarray:
    """Counts per second from a CSV: column `rate` if present, else the last column; a header row is
    optional."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"file: {path} is empty")
    column = -1
    try:
        float(rows[0][-1])
    except ValueError:
        header = [c.strip().lower() for c in rows[0]]
        column = header.index("rate") if "rate" in header else -1
        rows = rows[1:]
    try:
        values = np.array([float(r[column]) for r in rows])
    except (ValueError, IndexError) as exc:
        raise ValueError(f"file: {path}: not one number per row ({exc})") from exc
    if len(values) == 0 or (values < 0).any():
        raise ValueError(f"file: {path}: needs at least one row and no negative count")
    return values


def generate(cfg: SpikesConfig, rng: np.random.Generator | None = None) -> np.ndarray:
    """The rate series (int64 events/s, one per second) of a validated config. `rng` is needed for
    the noise and for profile random (derive it from the experiment seed)."""
    validate_spikes(cfg)
    if cfg.profile == "file":
        r = read_rate_file(cfg.file)
        if cfg.peak:
            r = r * (cfg.peak / r.max()) if r.max() > 0 else r
        return integer_counts(r)
    if rng is None:
        raise ValueError("profile: a generated spike series needs rng=numpy.random.Generator")
    if cfg.profile == "paper_like":
        knots = PAPER_LIKE_KNOTS
    else:
        knots = tuple(random_knots(rng, cfg.waves, cfg.length_s))
    e = envelope(knots, cfg.length_s)
    if cfg.texture:
        tail_from = int(knots[-2][0])
        t = np.arange(cfg.length_s)
        saw = np.where(t >= tail_from, ((t - tail_from) % 8) / 8.0, 0.0)
        e = e + saw * 110.0 * (e.max() / cfg.hi if cfg.profile == "random" else 1.0)
    e = e * (1.0 + ar1_noise(rng, cfg.length_s, cfg.noise_phi, cfg.noise_sd))
    r, _ = calibrate(e, cfg.lo, cfg.hi, cfg.mean)
    if cfg.peak:
        r = r * (cfg.peak / cfg.hi)
    return integer_counts(r)


def series_statistics(r: Sequence[float]) -> dict:
    """The statistics the reference is described by (for the report)."""
    a = np.asarray(r, dtype=float)
    d = np.diff(a)
    minutes = [float(a[i:i + 60].mean()) for i in range(0, len(a), 60)]
    return {"length_s": len(a), "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
            "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "diff_sd": float(d.std(ddof=1)) if len(d) > 1 else 0.0,
            "diff_max": float(np.abs(d).max()) if len(d) else 0.0, "minute_means": minutes}


def minute_rms_vs_reference(r: Sequence[float]) -> float:
    """RMS difference of the per-minute means against the reference's, relative to their mean."""
    ours = series_statistics(r)["minute_means"]
    ref = np.asarray(REFERENCE_MINUTE_MEANS[:len(ours)])
    diff = np.asarray(ours[:len(ref)]) - ref
    return float(np.sqrt(np.mean(diff ** 2)) / ref.mean())


def sha256(r: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(r, dtype=np.int64).tobytes()).hexdigest()


@dataclass(frozen=True)
class RatePattern(Pattern):
    """A rate series as a pattern: at time t the value is the rate of second ⌊t⌋; before 0 the first,
    after the end the last (held)."""

    name: str
    rates: Tuple[int, ...] = field(repr=False)
    step_s: float = 1.0

    def series(self, times_s: np.ndarray) -> np.ndarray:
        values = np.asarray(self.rates, dtype=np.int64)
        idx = np.floor(np.maximum(np.asarray(times_s, dtype=float), 0.0) / self.step_s).astype(np.int64)
        return values[np.minimum(idx, len(values) - 1)]

    @property
    def sha256(self) -> str:
        return sha256(np.asarray(self.rates))


@register_workload("spikes")
@dataclass
class Spikes(PatternConfig):
    """pattern.spikes.*: the spike generator's settings; its values are events/s, one per second."""

    kind: str = "spikes"
    spikes: SpikesConfig = field(default_factory=SpikesConfig)

    gives_rates = True
    counts_machines = False  # events/s: the PRESPS report plots them

    def validate(self) -> None:
        try:
            validate_spikes(self.spikes)
        except ValueError as exc:
            raise ValueError(f"spikes.{exc}") from exc

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        return RatePattern(self.name, tuple(int(v) for v in generate(self.spikes, rng)))
