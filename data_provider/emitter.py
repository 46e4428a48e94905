"""The tick schedule: tick k is due at start + k × tick, on an absolute schedule.

A tick that starts late (the process was descheduled, a previous tick took long, the broker pushed
back) is emitted at once, and so are the ticks after it until the schedule is caught up: no tick is
skipped (the items emitted always equal what the pattern implies) and the schedule never drifts,
because due times are computed from k, never from the previous tick's end. Each tick records its
lateness: the time between its due time and the start of its emission.

The clock is injected: ``SystemClock`` for real runs, ``FakeClock`` for tests that replay hours of
schedule without sleeping.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic clock (schedule)."""

    def sleep(self, seconds: float) -> None:
        """Sleep at least ``seconds``."""

    def wall_ms(self) -> int:
        """Epoch milliseconds (timestamps in messages)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told: ``sleep`` and ``advance`` move it forward."""

    def __init__(self, start_s: float = 1000.0, wall_start_ms: int = 1_763_788_800_000):
        self.now = float(start_s)
        self._wall_offset_ms = wall_start_ms - start_s * 1000.0
        self.sleeps: List[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > 0:
            self.now += seconds

    def advance(self, seconds: float) -> None:
        """Simulate work (or the process being descheduled) taking ``seconds``."""
        if seconds < 0:
            raise ValueError("a clock cannot go back")
        self.now += seconds

    def wall_ms(self) -> int:
        return int(round(self.now * 1000.0 + self._wall_offset_ms))


@dataclass(frozen=True)
class Tick:
    k: int
    t_s: float  # scheduled time since the run's start (k × tick)
    due_wall_ms: int  # epoch ms of the due time
    lateness_ms: float  # start of emission minus due time (>= 0)
    trace_t_s: Optional[float] = None  # the pattern's time this tick reads: t_s unless a restart paused the trace

    @property
    def pattern_t_s(self) -> float:
        return self.t_s if self.trace_t_s is None else self.trace_t_s


@dataclass(frozen=True)
class TickResult:
    tick: Tick
    emit_ms: float  # how long the emission of the tick took


EmitFn = Callable[[Tick], None]


class Emitter:
    """Calls ``emit(tick)`` for ticks 0..n_ticks-1 on the absolute schedule."""

    def __init__(self, tick_s: float, n_ticks: int, emit: EmitFn, clock: Optional[Clock] = None,
                 on_tick: Optional[Callable[[TickResult], None]] = None):
        if not tick_s > 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        if n_ticks < 0:
            raise ValueError(f"n_ticks must be >= 0, got {n_ticks}")
        self.tick_s = float(tick_s)
        self.n_ticks = int(n_ticks)
        self.emit = emit
        self.clock: Clock = clock or SystemClock()
        self.on_tick = on_tick
        self.results: List[TickResult] = []
        self._stop = threading.Event()
        self.start_monotonic: Optional[float] = None
        self.start_wall_ms: Optional[int] = None

    def stop(self) -> None:
        """Ask the emitter to stop after the current tick (thread-safe)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> List[TickResult]:
        clock = self.clock
        start = clock.monotonic()
        wall0 = clock.wall_ms()
        self.start_monotonic, self.start_wall_ms = start, wall0
        for k in range(self.n_ticks):
            if self._stop.is_set():
                break
            offset = k * self.tick_s
            due = start + offset
            now = clock.monotonic()
            while now < due:  # sleep may wake early on some platforms: never emit before due
                clock.sleep(due - now)
                now = clock.monotonic()
            tick = Tick(k=k, t_s=offset, due_wall_ms=wall0 + int(round(offset * 1000.0)),
                        lateness_ms=(now - due) * 1000.0)
            self.emit(tick)
            result = TickResult(tick, (clock.monotonic() - now) * 1000.0)
            self.results.append(result)
            if self.on_tick is not None:
                self.on_tick(result)
        return self.results


def ticks_for(duration_s: float, tick_s: float) -> int:
    """Ticks due within [0, duration): a 60 s run at 480 ms has ticks 0..124."""
    if duration_s <= 0:
        return 0
    n = int(duration_s // tick_s)
    return n + (1 if n * tick_s < duration_s - 1e-9 else 0)
