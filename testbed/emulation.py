"""The emulated network of the ODP experiments (docs/papers/odp.md#delay-and-availability-emulation):
a delay per ordered pair of hosts and an availability per host and per link.

Hosts are named as both backends name them, `vm<k>` for the k-th host leased in a run. A pair's
delay is Gaussian, N(mu_uv, sigma_uv) truncated at 0, with mu_uv and sigma_uv drawn uniformly from
the configured ranges by a stream that depends only on the emulation seed and the pair: the network
is the same in every run, repetition and configuration (a cluster is not re-cabled between runs),
and the ODP placement sees exactly the means the simulator uses. Per-item draws come from the run
seed (`Emulator`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Tuple

import numpy as np

from testbed.rng import DrawBuffer, stream


class AvailabilityMode(str, Enum):
    tuple = "tuple"  # each item handled on host u is lost with probability 1 - A_u, each inter-host hop with 1 - A_uv
    outage = "outage"  # hosts alternate up and down periods (exponential), down a share 1 - A_u of the time


@dataclass
class EmulationConfig:
    """`backend.emulation`: inter-host delay and availability (simulator, per-item model)."""

    enabled: bool = False
    seed: int = 1  # the network's own: mu and sigma per host pair
    delay_mean_ms: List[float] = field(default_factory=lambda: [12.0, 32.0])  # [low, high] of mu_uv
    delay_sd_ms: List[float] = field(default_factory=lambda: [1.0, 3.0])  # [low, high] of sigma_uv
    availability: Dict[str, float] = field(default_factory=dict)  # host (vm<k>) -> A_u; unnamed hosts 1
    link_availability: float = 1.0  # A_uv of every link between two hosts
    mode: AvailabilityMode = AvailabilityMode.tuple
    outage_mean_down_s: float = 10.0  # outage mode: mean down period (up periods: mean down x A / (1 - A))
    provider_host: str = "vm1"  # where the data provider (the topology's sources) runs


def host_index(host: str) -> Optional[int]:
    """k of `vm<k>`; None for any other name (a host reference not yet bound)."""
    if host.startswith("vm") and host[2:].isdigit():
        return int(host[2:])
    return None


class NetworkModel:
    """The static part: means, deviations and availabilities (what the ODP placement is told)."""

    def __init__(self, cfg: EmulationConfig):
        self.cfg = cfg
        self._pairs: Dict[Tuple[str, str], Tuple[float, float]] = {}

    def _pair(self, u: str, v: str) -> Tuple[float, float]:
        found = self._pairs.get((u, v))
        if found is None:
            rng = stream(self.cfg.seed, f"delay/{u}->{v}")
            lo, hi = self.cfg.delay_mean_ms
            mu = float(rng.uniform(lo, hi))
            lo, hi = self.cfg.delay_sd_ms
            found = self._pairs[(u, v)] = (mu, float(rng.uniform(lo, hi)))
        return found

    def mean_delay_ms(self, u: str, v: str) -> float:
        """mu_uv (0 on a host itself). A host reference not yet bound to a name (`new:...`) gets the
        middle of the range: its position in the network is not known before it is leased."""
        if u == v:
            return 0.0
        if host_index(u) is None or host_index(v) is None:
            return sum(self.cfg.delay_mean_ms) / 2.0
        return self._pair(u, v)[0]

    def sd_delay_ms(self, u: str, v: str) -> float:
        if u == v or host_index(u) is None or host_index(v) is None:
            return 0.0
        return self._pair(u, v)[1]

    def host_availability(self, host: str) -> float:
        return float(self.cfg.availability.get(host, 1.0))

    def link_availability(self, u: str, v: str) -> float:
        return 1.0 if u == v else float(self.cfg.link_availability)


class Emulator(NetworkModel):
    """The per-item part, seeded by the run: delay draws, losses, outage periods, and the counts of
    hops between hosts per monitoring interval (the `host_traffic` table)."""

    def __init__(self, cfg: EmulationConfig, seed: int):
        super().__init__(cfg)
        rng = stream(seed, "emulation")
        self._normal = DrawBuffer(lambda n: rng.standard_normal(n))
        self._uniform = DrawBuffer(lambda n: rng.random(n))
        self._outage_seed = seed
        self._outages: Dict[str, "_Outages"] = {}
        self.hops: Dict[Tuple[str, str], List[float]] = {}  # (u, v) -> [items, delay ms summed], this interval
        self.lost = 0

    def delay_s(self, u: str, v: str) -> float:
        """One draw of d(u, v) in seconds, N(mu, sigma) truncated at 0 (redrawn below 0)."""
        if u == v:
            return 0.0
        mu, sd = self.mean_delay_ms(u, v), self.sd_delay_ms(u, v)
        d = mu + sd * self._normal.next()
        while d < 0:
            d = mu + sd * self._normal.next()
        counts = self.hops.get((u, v))
        if counts is None:
            counts = self.hops[(u, v)] = [0.0, 0.0]
        counts[0] += 1
        counts[1] += d
        return d / 1000.0

    def hop_lost(self, u: str, v: str) -> bool:
        """tuple mode: an inter-host hop loses the item with probability 1 - A_uv."""
        a = self.link_availability(u, v)
        return a < 1.0 and self._uniform.next() >= a

    def host_lost(self, host: str, t: float) -> bool:
        """The item reaching `host` at t is lost (tuple: with probability 1 - A_u; outage: the host is down)."""
        a = self.host_availability(host)
        if a >= 1.0:
            return False
        if self.cfg.mode == AvailabilityMode.outage:
            periods = self._outages.get(host)
            if periods is None:
                periods = self._outages[host] = _Outages(stream(self._outage_seed, f"outage/{host}"), a,
                                                         self.cfg.outage_mean_down_s)
            return periods.down(t)
        return self._uniform.next() >= a

    def take_interval(self) -> Dict[Tuple[str, str], List[float]]:
        out, self.hops = self.hops, {}
        return out


class _Outages:
    """Alternating up and down periods of one host, exponential, starting up; queried at increasing
    times (items are handled in time order per queue; a query before the current period re-checks
    the periods kept)."""

    def __init__(self, rng: np.random.Generator, availability: float, mean_down_s: float):
        self.rng = rng
        self.mean_down = mean_down_s
        self.mean_up = mean_down_s * availability / (1.0 - availability)
        self.downs: List[Tuple[float, float]] = []  # [start, end) of each down period so far
        self.until = 0.0  # periods drawn up to here

    def down(self, t: float) -> bool:
        while self.until <= t:
            start = self.until + float(self.rng.exponential(self.mean_up))
            end = start + float(self.rng.exponential(self.mean_down))
            self.downs.append((start, end))
            self.until = end
        # the most recent periods are the likely ones
        for start, end in reversed(self.downs):
            if end <= t:
                return False
            if start <= t:
                return True
        return False


def validate_emulation(cfg: EmulationConfig, key: str = "backend.emulation") -> Optional[Tuple[str, str]]:
    """(key, message) of the first invalid value, None if all are valid."""
    for name in ("delay_mean_ms", "delay_sd_ms"):
        values = getattr(cfg, name)
        if len(values) != 2 or values[0] < 0 or values[1] < values[0]:
            return f"{key}.{name}", f"must be [low, high] with 0 <= low <= high, got {list(values)}"
    for host, a in cfg.availability.items():
        if host_index(host) is None:
            return f"{key}.availability.{host}", "hosts are named vm<k> (the k-th host leased in a run)"
        if not 0 < a <= 1:
            return f"{key}.availability.{host}", f"must lie in (0, 1], got {a}"
    if not 0 < cfg.link_availability <= 1:
        return f"{key}.link_availability", f"must lie in (0, 1], got {cfg.link_availability}"
    if not (cfg.outage_mean_down_s > 0 and math.isfinite(cfg.outage_mean_down_s)):
        return f"{key}.outage_mean_down_s", f"must be > 0, got {cfg.outage_mean_down_s}"
    if host_index(cfg.provider_host) is None:
        return f"{key}.provider_host", ("hosts are named vm<k> (the k-th host leased in a run), got "
                                        f"{cfg.provider_host!r}")
    return None
