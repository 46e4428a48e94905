"""Holding the provider's items at the source (a DABS-like restart with hold_source, live).

While the gate is closed the provider publishes nothing: each due tick is kept, in order. The first
tick after the gate opens publishes the held ticks first, stamped as if due then, so their latency
and item timeout start when they enter the topology (as the simulator's held sources do;
testbed/sim/network.py `hold_sources`). The load table keeps every tick's scheduled time, and the
provider counts an item as emitted when it is published. A gate closed with `drop` (a restart with
drop_source) drops the ticks instead: in the load table, never published.

The control loop closes and opens the gate (testbed/live/executor.py); the provider thread emits,
so the transport is only ever used from the provider's thread."""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable, List, Optional

from data_provider.emitter import Clock, Tick


class SourceGate:
    """Open by default; thread-safe."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.dropping = False  # what a closed gate does with the ticks: drop (true) or hold them

    def close(self, drop: bool = False) -> None:
        self.dropping = drop
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()


class GatedEmit:
    """The emitter's callback in front of `emit` (Provider.emit_tick)."""

    def __init__(self, emit: Callable[[Tick], None], gate: SourceGate, clock: Clock,
                 drop: Optional[Callable[[Tick], int]] = None):
        self.emit = emit
        self.drop = drop  # Provider.drop_tick: records the tick, publishes nothing; returns its items
        self.gate = gate
        self.clock = clock
        self.held: List[Tick] = []
        self.held_ticks = 0  # ticks held in the whole run
        self.dropped_items = 0  # items of the ticks dropped in the whole run

    def __call__(self, tick: Tick) -> None:
        if not self.gate.is_open and self.gate.dropping:
            if self.drop is None:
                raise RuntimeError("the source gate drops ticks but the provider cannot (no drop callback)")
            self.dropped_items += self.drop(tick)
            return
        if not self.gate.is_open:
            self.held.append(tick)
            self.held_ticks += 1
            return
        self.release()
        self.emit(tick)

    def release(self) -> None:
        """Publish what is held, stamped now (also at the run's end, whatever the gate says)."""
        if not self.held:
            return
        now_ms = self.clock.wall_ms()
        held, self.held = self.held, []
        for tick in held:
            self.emit(replace(tick, due_wall_ms=now_ms))
