"""Duration samples of the runner: both measurements, every n-th item sampled."""
from __future__ import annotations

import pytest

from operators.metrics import BusyTime, Metrics, duration_ms


def test_milliseconds_is_completion_minus_the_upstream_send_time():
    assert duration_ms("milliseconds", 1_000_250, 1_000_000, amqp_timestamp_s=999) == 250


def test_seconds_truncated_uses_the_amqp_timestamp_in_whole_seconds():
    # sent 0.999 s into second 1000 and done 1 ms later: visp measured 1 s more than it took
    assert duration_ms("seconds_truncated", 1_001_000, 1_000_999, amqp_timestamp_s=1000) == 1000
    assert duration_ms("seconds_truncated", 1_001_000, 1_000_999, amqp_timestamp_s=None) == 1000  # Kafka


def test_unknown_measurement_fails():
    with pytest.raises(ValueError):
        duration_ms("minutes", 1, 0, None)


def test_every_nth_completed_item_is_sampled_starting_with_the_first():
    m = Metrics("p", "O3", "i", sample_every=3, clock=lambda: 5.0)
    got = [m.completed(sent_ms=100, amqp_timestamp_s=None, completed_ms=100 + k) for k in range(10)]
    assert got == [0, None, None, 3, None, None, 6, None, None, 9]
    assert m.now_ms() == 5000


def test_counters_accumulate_into_totals():
    m = Metrics("p", "O3", "i")
    m.processed(3)
    m.processed()
    m.dead()
    assert (m.totals.processed, m.totals.dead) == (4, 1)


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_busy_time_is_split_exactly_at_each_take_and_summed_over_slots():
    clock = Clock()
    busy = BusyTime(clock)
    busy.start(0)
    clock.t = 1.0
    assert busy.take() == 1.0  # slot 0 busy for the whole interval
    busy.start(1)
    clock.t = 1.5
    busy.stop(0)
    clock.t = 3.0
    assert busy.take() == 0.5 + 2.0  # slot 0 until it stopped, slot 1 since it started
    busy.stop(1)
    assert busy.take() == 0.0 and busy.busy_slots() == 0


class Pipe:
    """Records a metrics flush (a redis pipeline's xadd / hincrby)."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.entries = []

    def pipeline(self, transaction=False):
        return self

    def xadd(self, _stream, fields):
        self.entries.append(fields)

    def hincrby(self, *_args):
        pass

    def execute(self):
        if self.fail:
            raise ConnectionError("Redis away")


def test_count_entries_carry_emitted_and_busy_ms_since_the_previous_one():
    m = Metrics("p", "O3", "i", clock=lambda: 5.0)
    clock = Clock()
    m.busy = BusyTime(clock)
    m.busy.start(0)
    clock.t = 0.2004
    m.busy.stop(0)
    m.processed(2, emitted=6)
    assert m.flush(Pipe(fail=True)) is False  # kept for the next flush
    m.processed(1, emitted=3)
    m.busy.start(0)  # still busy at the flush: counted up to it
    clock.t = 0.5006
    redis = Pipe()
    assert m.flush(redis) is True
    [count] = redis.entries
    assert (count["processed"], count["emitted"], count["busy_ms"], count["dead"]) == (3, 9, 501, 0)
    clock.t = 0.7003  # 199.7 ms more, less the 0.6 ms written ahead: the entries sum to the busy time
    redis = Pipe()
    m.flush(redis)
    assert redis.entries[0]["busy_ms"] == 199 and redis.entries[0]["emitted"] == 0
    assert (m.totals.processed, m.totals.emitted) == (3, 9) and m.busy_total_s == pytest.approx(0.7)
