"""The machine's load from other processes during a live run: what the CPUs did apart from the run.

A live run's service times depend on what else the machine runs, so the run records, per monitoring
interval, the machine's busy CPU (/proc/stat) and how much of it was the run's own: its operator
containers (the cgroup CPU the instances report, testbed/live/metrics_reader.py), this testbed process
(control loop, monitor, the provider thread) and the services it talks to (RabbitMQ, Redis, the Docker
daemons, by process name). What is left is the load of other processes; the manifest keeps its
mean, p95 and maximum in cores (`details.machine_load`, docs/event-log.md).

Only meaningful when the hosts run on this machine's Docker engine: with a remote engine the run's
containers are not among /proc/stat's CPUs, and `other` would hold the run's own services only.
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

SERVICE_NAMES = ("beam.smp", "epmd", "redis-server", "dockerd", "containerd", "containerd-shim", "docker-proxy")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat cpu line: user nice system (idle iowait) irq softirq steal
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s(stat: str = "/proc/stat") -> Optional[float]:
    """CPU seconds all CPUs of the machine were busy since boot (guest time is inside user)."""
    try:
        first = Path(stat).read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:]]
    return sum(values[i] for i in BUSY_FIELDS if i < len(values)) / CLOCK_TICKS


def services_cpu_s(proc: str = "/proc", names: Tuple[str, ...] = SERVICE_NAMES) -> float:
    """CPU seconds so far of the processes named like the run's services (their own threads; a
    process that ended meanwhile drops out, which a delta clips at 0)."""
    total = 0
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = text[text.find("(") + 1:text.rfind(")")], text[text.rfind(")") + 2:].split()
        if name in names:
            total += int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    return total / CLOCK_TICKS


def own_cpu_s() -> float:
    """CPU seconds of this testbed process, all its threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(frozen=True)
class Readings:
    """Cumulative CPU seconds at one moment."""

    machine: Optional[float]
    testbed: float
    services: float


def read_now() -> Readings:
    return Readings(machine_busy_s(), own_cpu_s(), services_cpu_s())


@dataclass
class LoadInterval:
    """One monitoring interval, in cores (CPU seconds per second)."""

    t_s: float
    machine: float
    containers: float
    testbed: float
    services: float

    @property
    def other(self) -> float:
        return max(0.0, self.machine - self.containers - self.testbed - self.services)


@dataclass
class MachineLoad:
    """Per monitoring interval: the machine's busy cores and the run's share of them."""

    read: Callable[[], Readings] = read_now
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    intervals: List[LoadInterval] = field(default_factory=list)
    unreadable: str = ""  # why nothing was recorded
    unreported: int = 0  # intervals in which no container reported its cgroup CPU (counted as 0)
    _last: Optional[Readings] = None
    _last_t: float = 0.0

    def start(self, t: float) -> None:
        self._last, self._last_t = self.read(), t
        if self._last.machine is None:
            self.unreadable = "no /proc/stat on this machine"

    def interval(self, t: float, containers_cpu_ms: Optional[int]) -> None:
        """Close the interval ending at t; `containers_cpu_ms`: the run's containers' CPU in it."""
        if self._last is None or self.unreadable:
            return
        now, span = self.read(), t - self._last_t
        last, self._last, self._last_t = self._last, now, t
        if span <= 0 or now.machine is None or last.machine is None:
            return
        self.unreported += containers_cpu_ms is None
        self.intervals.append(LoadInterval(
            t, (now.machine - last.machine) / span, (containers_cpu_ms or 0) / 1000.0 / span,
            (now.testbed - last.testbed) / span, max(0.0, now.services - last.services) / span))

    def summary(self) -> Dict[str, object]:
        """What the manifest keeps: mean, p95 and max cores of each part, and how it was measured."""
        out: Dict[str, object] = {"cpus": self.cpus, "intervals": len(self.intervals),
                                  "how": "cores = CPU seconds per second of each monitoring interval; other = "
                                         "machine (/proc/stat) - containers (their cgroup CPU) - testbed process "
                                         "- services (" + ", ".join(SERVICE_NAMES) + ")"}
        if self.unreadable or not self.intervals:
            out["unreadable"] = self.unreadable or "no monitoring interval"
            return out
        for part in ("machine", "containers", "testbed", "services", "other"):
            v = np.array([getattr(i, part) for i in self.intervals])
            out[f"{part}_cores"] = {"mean": _r(v.mean()), "p95": _r(np.percentile(v, 95)), "max": _r(v.max())}
        out["other_cores_by_interval"] = [[_r(i.t_s), _r(i.other)] for i in self.intervals]
        if self.unreported:
            out["containers_unreported_intervals"] = self.unreported
        return out


def _r(x: float) -> float:
    return round(float(x), 3)
