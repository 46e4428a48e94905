"""Duration samples of the runner: both measurements, every n-th item sampled."""
from __future__ import annotations

import pytest

from operators.metrics import Metrics, duration_ms


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
