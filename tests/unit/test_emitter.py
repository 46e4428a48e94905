"""The absolute tick schedule, proved with a fake clock (no sleeping)."""
from __future__ import annotations

import numpy as np
import pytest

from data_provider.emitter import Emitter, FakeClock, Tick, ticks_for

TICK = 0.48


def run(n, work, clock=None):
    clock = clock or FakeClock()
    seen: list[Tick] = []

    def emit(tick: Tick) -> None:
        seen.append(tick)
        clock.advance(work(tick.k))

    start = clock.now
    Emitter(TICK, n, emit, clock).run()
    return clock, start, seen


def test_on_time_ticks_are_emitted_exactly_when_due():
    clock, start, seen = run(100, lambda k: 0.01)
    assert [t.k for t in seen] == list(range(100))
    assert all(t.lateness_ms == pytest.approx(0.0, abs=1e-6) for t in seen)
    assert [t.t_s for t in seen] == [k * TICK for k in range(100)]
    assert seen[1].due_wall_ms - seen[0].due_wall_ms == 480


def test_a_late_tick_catches_up_without_skipping_and_records_lateness():
    # tick 3 takes 1.5 s: ticks 4..6 are due meanwhile and go out at once, then the schedule holds
    clock, start, seen = run(12, lambda k: 1.5 if k == 3 else 0.01)
    late = [round(t.lateness_ms, 6) for t in seen]
    assert late[:4] == [0.0] * 4
    # tick 3 starts at 1.44 s and ends at 2.94 s; tick 4 (due 1.92) starts then, 5 and 6 follow 10 ms apart
    assert late[4] == pytest.approx(2940 - 1920)
    assert late[5] == pytest.approx(2950 - 2400)
    assert late[6] == pytest.approx(2960 - 2880)
    assert late[7:] == [0.0] * 5  # caught up: on time again
    assert [t.k for t in seen] == list(range(12))


def test_no_drift_over_hours_of_jittery_ticks():
    rng = np.random.default_rng(1)
    works = rng.uniform(0.0, 0.45, size=30_000)  # 4 hours of ticks, each taking up to 450 ms
    clock = FakeClock(start_s=50.0)
    emitted_at = []

    def emit(tick):
        emitted_at.append(clock.now)
        clock.advance(works[tick.k])

    Emitter(TICK, len(works), emit, clock).run()
    due = 50.0 + np.arange(len(works)) * TICK
    assert np.allclose(emitted_at, due, atol=1e-6)  # every tick exactly on its absolute due time


def test_lateness_is_time_since_due_and_the_schedule_stays_absolute_after_a_long_stall():
    clock, start, seen = run(200, lambda k: 10.0 if k == 50 else 0.0)
    # 10 s stall: ~20 ticks late, then back on schedule; the last tick is still due at start + 199 * 0.48
    assert seen[-1].lateness_ms == pytest.approx(0.0, abs=1e-6)
    assert clock.now == pytest.approx(start + 199 * TICK)
    assert max(t.lateness_ms for t in seen) == pytest.approx(10_000 - 480)
    assert sum(1 for t in seen if t.lateness_ms > 0) == 20


def test_stop_ends_after_the_current_tick():
    clock = FakeClock()
    emitter: Emitter

    def emit(tick):
        if tick.k == 4:
            emitter.stop()

    emitter = Emitter(TICK, 100, emit, clock)
    results = emitter.run()
    assert len(results) == 5 and emitter.stopped


def test_ticks_for_duration():
    assert ticks_for(60, 0.48) == 125
    assert ticks_for(600, 0.48) == 1250
    assert ticks_for(1.0, 0.48) == 3  # 0, 0.48, 0.96
    assert ticks_for(0.96, 0.48) == 2
