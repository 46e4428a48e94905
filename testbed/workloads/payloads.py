"""Seeded sensor payloads of one simulated manufacturing machine
(docs/papers/btu-provisioning.md#sources), with plausible values, unlike the original provider's
(docs/papers/btu-provisioning.md#visp-data-provider).

Each machine has its own named RNG streams (``provider.<machine>.<kind>`` from the run seed), so a
machine's readings do not depend on how many other machines are active, and adding a stream never
changes another's draws. A machine's state advances only in ticks in which it is active (call
``step`` once per active tick, then draw that tick's readings).

* **availability**: a three-state Markov chain per tick (available / planned downtime / defect).
  Incidents last several ticks (geometric durations with the configured means); the long-run shares
  equal ``share_planned_downtime`` and ``share_defect`` (default 5 % each, available 90 %).
* **temperature**: a mean-reverting random walk (Ornstein-Uhlenbeck, per reading) around ``mean_c``
  plus occasional excursions of ``excursion_c`` that last a few ticks and cross ``threshold_c``
  (the threshold O6 warns about); outside excursions readings stay well below it.
* **production**: one record per tick (a tick is one machine minute): planned production time
  (``reporting_cycle_s``, 0 in planned downtime), produced units (binomial around the ideal count
  times a performance of ~0.9, 0 unless available), a small defective share, the tick's status.

Timestamps are epoch milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from testbed.rng import stream

AVAILABLE, PLANNED_DOWNTIME, DEFECT = "available", "planned downtime", "defect"
STATUSES: Tuple[str, ...] = (AVAILABLE, PLANNED_DOWNTIME, DEFECT)
MACHINE_TYPES: Tuple[str, ...] = ("injection moulding", "cnc milling", "assembly")

AVAILABILITY, TEMPERATURE, PRODUCTION = "availability", "temperature", "production"
KINDS: Tuple[str, ...] = (AVAILABILITY, TEMPERATURE, PRODUCTION)


class PayloadConfigError(ValueError):
    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class AvailabilityModel:
    share_planned_downtime: float = 0.05
    share_defect: float = 0.05
    mean_planned_downtime_ticks: float = 10.0
    mean_defect_ticks: float = 6.0


@dataclass
class TemperatureModel:
    mean_c: float = 70.0
    sd_c: float = 2.0  # stationary standard deviation of the drift
    reversion: float = 0.02  # mean reversion per reading (OU theta)
    noise_c: float = 0.2  # measurement noise per reading
    threshold_c: float = 85.0  # O6's warning threshold
    excursion_per_tick: float = 0.01  # chance that an excursion starts in a tick
    mean_excursion_ticks: float = 3.0
    excursion_c: float = 22.0  # added during an excursion


@dataclass
class ProductionModel:
    reporting_cycle_s: int = 60  # planned production time of one tick (one machine minute)
    ideal_cycle_s: float = 1.2  # ideal time per unit: 50 units per cycle at full performance
    performance_mean: float = 0.9
    performance_sd: float = 0.05
    defective_share: float = 0.02


@dataclass
class PayloadConfig:
    availability: AvailabilityModel = field(default_factory=AvailabilityModel)
    temperature: TemperatureModel = field(default_factory=TemperatureModel)
    production: ProductionModel = field(default_factory=ProductionModel)


def validate_payloads(cfg: PayloadConfig, prefix: str = "payloads") -> None:
    a, t, p = cfg.availability, cfg.temperature, cfg.production
    for key, value in (("share_planned_downtime", a.share_planned_downtime), ("share_defect", a.share_defect)):
        if not 0.0 <= value < 1.0:
            raise PayloadConfigError(f"{prefix}.availability.{key}", f"must be in [0, 1), got {value}")
    if a.share_planned_downtime + a.share_defect >= 1.0:
        raise PayloadConfigError(f"{prefix}.availability.share_defect", "shares of downtime and defect must sum to < 1")
    for key in ("mean_planned_downtime_ticks", "mean_defect_ticks"):
        if not getattr(a, key) >= 1.0:
            raise PayloadConfigError(f"{prefix}.availability.{key}", f"must be >= 1, got {getattr(a, key)}")
    # the chance to start an incident in an available tick must be a probability
    if sum(_start_probabilities(a)) > 1.0:
        raise PayloadConfigError(f"{prefix}.availability", "shares too high for the mean incident durations")
    if t.sd_c < 0 or t.noise_c < 0:
        raise PayloadConfigError(f"{prefix}.temperature.sd_c", "sd_c and noise_c must be >= 0")
    if not 0.0 < t.reversion <= 1.0:
        raise PayloadConfigError(f"{prefix}.temperature.reversion", f"must be in (0, 1], got {t.reversion}")
    if not 0.0 <= t.excursion_per_tick <= 1.0:
        raise PayloadConfigError(f"{prefix}.temperature.excursion_per_tick",
                                 f"must be in [0, 1], got {t.excursion_per_tick}")
    if not t.mean_excursion_ticks >= 1.0:
        raise PayloadConfigError(f"{prefix}.temperature.mean_excursion_ticks", "must be >= 1")
    if not p.reporting_cycle_s > 0:
        raise PayloadConfigError(f"{prefix}.production.reporting_cycle_s", "must be > 0")
    if not p.ideal_cycle_s > 0:
        raise PayloadConfigError(f"{prefix}.production.ideal_cycle_s", "must be > 0")
    if not 0.0 <= p.performance_mean <= 1.0:
        raise PayloadConfigError(f"{prefix}.production.performance_mean", "must be in [0, 1]")
    if not 0.0 <= p.defective_share <= 1.0:
        raise PayloadConfigError(f"{prefix}.production.defective_share", "must be in [0, 1]")


def _start_probabilities(a: AvailabilityModel) -> Tuple[float, float]:
    """Per-tick chances to enter planned downtime / defect from 'available' that give the shares:
    share_x = p_x * mean_x * share_available."""
    available = 1.0 - a.share_planned_downtime - a.share_defect
    return (a.share_planned_downtime / (available * a.mean_planned_downtime_ticks),
            a.share_defect / (available * a.mean_defect_ticks))


def items_per_incident(cfg: PayloadConfig, kind: str, readings_per_tick: int) -> float:
    """Mean readings of one kind per *new* incident of a machine, the incidents the live O2 and O6
    warn about (the simulator's `emission.items_per_incident`, docs/architecture.md#emission):

    * availability (O2, a defect): a machine enters `defect` share_defect / mean_defect_ticks times
      per active tick (from `available`, at the long-run shares);
    * temperature (O6, an excursion over the threshold): an excursion lasts mean_excursion_ticks,
      the tick after it cannot start one, and each later tick starts one with excursion_per_tick,
      so one begins every mean_excursion_ticks + 1 / excursion_per_tick ticks (a reading of an
      excursion that dips below the threshold and opens a second incident is rare: ~1 % more).

    Infinite when the kind never has an incident."""
    if kind == AVAILABILITY:
        a = cfg.availability
        per_tick = a.share_defect / a.mean_defect_ticks
    elif kind == TEMPERATURE:
        t = cfg.temperature
        per_tick = 1.0 / (t.mean_excursion_ticks + 1.0 / t.excursion_per_tick) if t.excursion_per_tick > 0 else 0.0
    else:
        raise ValueError(f"{kind!r} readings have no incidents (availability, temperature)")
    return readings_per_tick / per_tick if per_tick > 0 else float("inf")


@dataclass(frozen=True)
class ProductionRecord:
    """What a machine's production display shows (the eight lines of the image, in order)."""

    machine_id: str
    machine_type: str
    location: str
    produced_units: int
    defective_units: int
    planned_production_time_s: int
    status: str
    timestamp_ms: int


def machine_id(index: int) -> str:
    return f"machine-{index + 1:02d}"


class Machine:
    """One simulated machine: per-tick state and its three seeded reading streams."""

    def __init__(self, index: int, seed: int, cfg: PayloadConfig | None = None):
        self.cfg = cfg or PayloadConfig()
        self.index = index
        self.machine_id = machine_id(index)
        self.machine_type = MACHINE_TYPES[index % len(MACHINE_TYPES)]
        self.location = f"hall {index // 8 + 1} line {index % 8 + 1}"
        self._rng = {k: stream(seed, f"provider.{self.machine_id}.{k}") for k in KINDS}
        self._p_planned, self._p_defect = _start_probabilities(self.cfg.availability)
        self.status = AVAILABLE
        t = self.cfg.temperature
        self._drift = float(self._rng[TEMPERATURE].normal(0.0, t.sd_c))  # deviation from mean_c
        self._excursion_left = 0
        self.ticks = 0

    # -- per-tick state ----------------------------------------------------------------------

    def step(self) -> None:
        """Advance the machine by one (active) tick: status and temperature excursion state."""
        a = self.cfg.availability
        r_status, r_excursion = self._rng[AVAILABILITY].random(2)
        if self.status == AVAILABLE:
            if r_status < self._p_planned:
                self.status = PLANNED_DOWNTIME
            elif r_status < self._p_planned + self._p_defect:
                self.status = DEFECT
        elif self.status == PLANNED_DOWNTIME:
            if r_status < 1.0 / a.mean_planned_downtime_ticks:
                self.status = AVAILABLE
        elif r_status < 1.0 / a.mean_defect_ticks:
            self.status = AVAILABLE
        t = self.cfg.temperature
        if self._excursion_left > 0:
            self._excursion_left -= 1
        elif r_excursion < t.excursion_per_tick:
            self._excursion_left = int(self._rng[TEMPERATURE].geometric(1.0 / t.mean_excursion_ticks))
        self.ticks += 1

    @property
    def in_excursion(self) -> bool:
        return self._excursion_left > 0

    # -- readings of the current tick --------------------------------------------------------

    def availability(self, start_ms: int, spacing_ms: float, n: int) -> List[Dict[str, object]]:
        return [{"machine_id": self.machine_id, "status": self.status,
                 "timestamp_ms": start_ms + int(i * spacing_ms)} for i in range(n)]

    def temperature(self, start_ms: int, spacing_ms: float, n: int) -> List[Dict[str, object]]:
        t = self.cfg.temperature
        shocks = self._rng[TEMPERATURE].standard_normal(2 * n)
        # OU step with the stationary sd kept at sd_c: x' = (1-theta) x + sd sqrt(1-(1-theta)^2) eps
        keep = 1.0 - t.reversion
        scale = t.sd_c * float(np.sqrt(1.0 - keep * keep))
        offset = t.mean_c + (t.excursion_c if self.in_excursion else 0.0)
        out = []
        drift = self._drift
        for i in range(n):
            drift = keep * drift + scale * float(shocks[i])
            value = offset + drift + t.noise_c * float(shocks[n + i])
            out.append({"machine_id": self.machine_id, "temperature_c": round(value, 2),
                        "timestamp_ms": start_ms + int(i * spacing_ms)})
        self._drift = drift
        return out

    def production(self, timestamp_ms: int) -> ProductionRecord:
        p = self.cfg.production
        rng = self._rng[PRODUCTION]
        performance = rng.standard_normal()
        ideal_units = int(p.reporting_cycle_s / p.ideal_cycle_s)
        if self.status == AVAILABLE:
            share = min(max(p.performance_mean + p.performance_sd * float(performance), 0.0), 1.0)
            produced = int(rng.binomial(ideal_units, share))
            defective = int(rng.binomial(produced, p.defective_share)) if produced else 0
        else:
            produced = defective = 0
        planned = 0 if self.status == PLANNED_DOWNTIME else int(p.reporting_cycle_s)
        return ProductionRecord(self.machine_id, self.machine_type, self.location, produced, defective,
                                planned, self.status, int(timestamp_ms))
