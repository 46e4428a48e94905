"""The provider's items during a DABS-like restart's downtime, live (Restart.source).

While the gate is closed the provider publishes nothing. What becomes of each due tick is the
gate's mode:
* `hold`: kept, in order; the first tick after the gate opens publishes the held ticks first,
  stamped as if due then, so their latency and item timeout start when they enter the topology (as
  the simulator's held sources do; testbed/sim/network.py `source_downtime`). The load table keeps
  every tick's scheduled time, and the provider counts an item as emitted when it is published.
* `drop`: dropped: in the load table, never published.
* `pause`: skipped, as if the trace's clock stood still: no tick is made (the machines do not move
  on, the load table has no row); after the gate opens, each tick reads the pattern at its time
  minus the time paused so far, so the trace resumes where it stopped and its last part, which
  would fall after the run's end, is not emitted.

The control loop closes and opens the gate (testbed/live/executor.py); the provider thread emits,
so the transport is only ever used from the provider's thread."""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable, List, Optional

from data_provider.emitter import Clock, Tick

GATE_MODES = ("hold", "drop", "pause")


class SourceGate:
    """Open by default; thread-safe."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.mode = "hold"  # what a closed gate does with the ticks (GATE_MODES)

    def close(self, mode: str = "hold") -> None:
        if mode not in GATE_MODES:
            raise ValueError(f"source gate mode: must be one of {', '.join(GATE_MODES)}, got {mode!r}")
        self.mode = mode
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()


class GatedEmit:
    """The emitter's callback in front of `emit` (Provider.emit_tick)."""

    def __init__(self, emit: Callable[[Tick], None], gate: SourceGate, clock: Clock,
                 drop: Optional[Callable[[Tick], int]] = None, tick_s: Optional[float] = None):
        self.emit = emit
        self.drop = drop  # Provider.drop_tick: records the tick, publishes nothing; returns its items
        self.gate = gate
        self.clock = clock
        self.tick_s = tick_s  # the emitter's tick (pausing the trace needs it)
        self.held: List[Tick] = []
        self.held_ticks = 0  # ticks held in the whole run
        self.dropped_items = 0  # items of the ticks dropped in the whole run
        self.paused_ticks = 0  # ticks skipped while the trace was paused, in the whole run

    def __call__(self, tick: Tick) -> None:
        if not self.gate.is_open:
            mode = self.gate.mode
            if mode == "drop":
                if self.drop is None:
                    raise RuntimeError("the source gate drops ticks but the provider cannot (no drop callback)")
                self.dropped_items += self.drop(tick)
            elif mode == "pause":
                if self.tick_s is None:
                    raise RuntimeError("the source gate pauses the trace but knows no tick length (tick_s)")
                self.paused_ticks += 1
            else:
                self.held.append(tick)
                self.held_ticks += 1
            return
        self.release()
        if self.paused_ticks:  # the trace resumes where it stopped
            assert self.tick_s is not None  # pausing required it
            tick = replace(tick, trace_t_s=tick.t_s - self.paused_ticks * self.tick_s)
        self.emit(tick)

    def release(self) -> None:
        """Publish what is held, stamped now (also at the run's end, whatever the gate says)."""
        if not self.held:
            return
        now_ms = self.clock.wall_ms()
        held, self.held = self.held, []
        for tick in held:
            self.emit(replace(tick, due_wall_ms=now_ms))
