"""The simulator's time: fixed steps, the provider's ticks, and the stepping loop of a network model
between two moments the simulator must act (a cloud event, a monitoring read, a reasoning cycle)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from testbed.topology import Topology
from testbed.workloads.patterns import Pattern

EPS = 1e-9  # time comparisons of steps, ticks and intervals


@dataclass(frozen=True)
class StepClock:
    """Step k serves [k·dt, min((k+1)·dt, duration))."""

    dt: float
    duration: float

    @property
    def steps(self) -> int:
        return math.ceil(self.duration / self.dt - EPS)

    def t0(self, step: int) -> float:
        return step * self.dt

    def t1(self, step: int) -> float:
        return min((step + 1) * self.dt, self.duration)


@dataclass(frozen=True)
class SourceTicks:
    """Every tick of a run on the provider's absolute schedule (t += tick, never skipped) and the
    machines active at each. Per tick, each source emits machines × its items per tick and sends
    them along each of its edges (sources by name, then their downstream operators)."""

    times: List[float]
    machines: List[int]
    sources: Tuple[Tuple[str, int], ...]  # (source, items per tick per machine)
    edges: Tuple[Tuple[str, str, int], ...]  # (source, operator, items per tick per machine)

    @classmethod
    def of_run(cls, topology: Topology, pattern: Pattern, duration: float) -> "SourceTicks":
        times, t = [], 0.0
        while t < duration - EPS:  # every tick the steps emit: each before its step's end - EPS
            times.append(t)
            t += topology.tick_s
        machines = pattern.series(np.array(times, dtype=float)).tolist()  # = machines_at(t), tick by tick
        return cls(times, machines, tuple((s.name, s.items_per_tick) for s in topology.sources),
                   tuple((s.name, d, s.items_per_tick) for s in topology.sources for d in s.downstream))

    def emitted(self, times: Union[Sequence[float], np.ndarray], end: int) -> "SourceTicks":
        """The ticks [0, end) as a network emitted them, at `times` (shifted by paused sources)."""
        return SourceTicks(list(times[:end]), self.machines[:end], self.sources, self.edges)

    def items(self, first: int, end: int) -> int:
        """Items all sources emitted in ticks [first, end)."""
        return sum(n for _, n in self.sources) * sum(self.machines[first:end])

    def load_table(self) -> Dict[str, list]:
        """The event log's `load` table: one row per tick and source."""
        n = len(self.sources)
        machines = np.array(self.machines, dtype=np.int64)
        per_machine = np.array([k for _, k in self.sources], dtype=np.int64)
        return {
            "t_s": np.repeat(np.array(self.times, dtype=np.float64), n).tolist(),
            "machines": np.repeat(machines, n).tolist(),
            "source": [s for s, _ in self.sources] * len(self.times),
            "items": (machines[:, None] * per_machine[None, :]).ravel().tolist(),
            "lateness_ms": [0.0] * (n * len(self.times)),
        }


@dataclass
class SourcePause:
    """The sources' trace clock, stopped during restarts' downtimes (Restart.source `pause`): the
    trace is read at t minus the downtime so far, so every tick not yet emitted moves by the time
    the clock newly stands still (overlapping downtimes stop it once)."""

    until: float = -math.inf  # the end of the latest downtime

    def stop(self, t: float, until: float) -> float:
        """Stop the clock over [t, until); returns by how much the ticks not yet emitted move."""
        shift = max(0.0, until - max(t, self.until))
        self.until = max(self.until, until)
        return shift


class SteppedInPython:
    """The stepping loop of a network model in plain Python (the per-item reference model's; the
    cohort model runs the same loop compiled). The model provides `send` and `advance`."""

    def set_sources(self, clock: StepClock, ticks: SourceTicks) -> None:
        self.clock, self.ticks, self.ticks_emitted = clock, ticks, 0
        self.tick_times = list(ticks.times)  # when each tick is emitted (paused sources move them)

    def set_capacity(self, slots: Dict[str, int], service_s: Dict[str, float],
                     instances: Dict[str, Sequence[str]]) -> None:
        self._capacity = (slots, service_s, instances)

    def send(self, source: str, operator: str, t: float, count: int) -> None:
        raise NotImplementedError  # the model's

    def advance(self, t0: float, t1: float, slots: Dict[str, int], service_s: Dict[str, float],
                instances: Dict[str, Sequence[str]]) -> None:
        raise NotImplementedError  # the model's

    def run(self, step: int, stop_after: float, next_event: float) -> int:
        """Emit and serve from `step` on; return the next step: after the first step ending at or
        after `stop_after`, before the first step starting at or after `next_event`, or at the end."""
        clock, ticks, times = self.clock, self.ticks, self.tick_times
        while True:
            t0, t1 = clock.t0(step), clock.t1(step)
            k = self.ticks_emitted
            while k < len(times) and times[k] < t1 - EPS:
                for source, operator, per_machine in ticks.edges:
                    self.send(source, operator, times[k], ticks.machines[k] * per_machine)
                k += 1
            self.ticks_emitted = k
            self.advance(t0, t1, *self._capacity)
            step += 1
            if t1 >= stop_after or step >= clock.steps or clock.t0(step) >= next_event:
                return step
