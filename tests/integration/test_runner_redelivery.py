"""The runner against the real Redis: an input processed twice before either finish was recorded
(its acknowledgement lost in a broker restart and the input redelivered while the first processing
still waited for its confirms) is counted once, in the processed and emitted counters alike."""
from __future__ import annotations

import pytest

from operators.api import OperatorContext, emitted_hash, processed_hash, seen_key
from operators.runner import Runner
from operators.runner_config import RunnerConfig
from operators.sources import Outcome
from tests.unit.runner_fakes import TOPOLOGY, FlagStore, HandPublisher, HandSource, Twice, envelope, wait_until

pytestmark = pytest.mark.integration


def test_an_input_finished_twice_is_counted_once(redis_client, unique_prefix):
    cfg = RunnerConfig(operator="A", prefix=unique_prefix, topology=TOPOLOGY, dedup_ttl_s=60, metrics_flush_s=3600,
                       drain_timeout_s=5, parallel=1, sample_every=1, prefetch=5, activation_poll_s=0)
    source, publisher = HandSource(cfg.wiring().inputs("A")), HandPublisher()
    runner = Runner(cfg, Twice(OperatorContext("A", "a-1", unique_prefix, redis_client)), source, publisher,
                    redis_client, sleep=lambda _s: None, activation=FlagStore())
    runner.start()
    try:
        source.push(envelope(1), token=1)  # processed, its emissions not yet confirmed ...
        wait_until(lambda: len(publisher.published) == 2)
        source.push(envelope(1), token=2)  # ... when the broker hands it out again: not finished yet
        wait_until(lambda: len(publisher.published) == 4)
        source.push(envelope(2), token=3)
        wait_until(lambda: len(publisher.published) == 6)
        publisher.confirm(6)
        wait_until(lambda: len(source.settled) == 3)
        assert sorted(source.settled) == [(1, Outcome.ACK), (2, Outcome.ACK), (3, Outcome.ACK)]
        counts = {h: {k.decode(): int(v) for k, v in redis_client.hgetall(h).items()}
                  for h in (processed_hash(unique_prefix), emitted_hash(unique_prefix))}
        assert counts == {processed_hash(unique_prefix): {"A": 2}, emitted_hash(unique_prefix): {"A": 4}}
        assert runner.stats.duplicates == 1
        assert redis_client.exists(seen_key(unique_prefix, "A", "S", "m/S/1"))
        # a third delivery of the finished input is recognised before processing: nothing emitted
        source.push(envelope(1), token=4)
        wait_until(lambda: len(source.settled) == 4)
        assert len(publisher.published) == 6 and runner.stats.duplicates == 2
    finally:
        runner.drain()
