"""The runner against the real Redis: an input processed twice before either finish was recorded
(its acknowledgement lost in a broker restart and the input redelivered to another instance while the
first processing still waited for its confirms) is counted once, in the processed and emitted
counters alike; redelivered to the same instance meanwhile, it waits for the first processing and is
settled with it."""
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

    def instance(name: str):
        source, publisher = HandSource(cfg.wiring().inputs("A")), HandPublisher()
        runner = Runner(cfg, Twice(OperatorContext("A", name, unique_prefix, redis_client)), source, publisher,
                        redis_client, sleep=lambda _s: None, activation=FlagStore())
        runner.start()
        return runner, source, publisher

    (runner, source, publisher), (other, other_source, other_publisher) = instance("a-1"), instance("a-2")
    try:
        source.push(envelope(1), token=1)  # processed, its emissions not yet confirmed ...
        wait_until(lambda: len(publisher.published) == 2)
        source.push(envelope(1), token=2)  # ... when the broker hands it out again, to the same instance: it waits
        wait_until(lambda: runner.stats.duplicates == 1)
        other_source.push(envelope(1), token=5)  # ... or to another one: not finished yet, processed again
        wait_until(lambda: len(other_publisher.published) == 2)
        source.push(envelope(2), token=3)
        wait_until(lambda: len(publisher.published) == 4)
        publisher.confirm(4)
        wait_until(lambda: len(source.settled) == 3)
        other_publisher.confirm(2)
        wait_until(lambda: len(other_source.settled) == 1)
        assert sorted(source.settled) == [(1, Outcome.ACK), (2, Outcome.ACK), (3, Outcome.ACK)]
        assert other_source.settled == [(5, Outcome.ACK)]
        counts = {h: {k.decode(): int(v) for k, v in redis_client.hgetall(h).items()}
                  for h in (processed_hash(unique_prefix), emitted_hash(unique_prefix))}
        assert counts == {processed_hash(unique_prefix): {"A": 2}, emitted_hash(unique_prefix): {"A": 4}}
        assert other.stats.duplicates == 1  # finished second: counted nowhere
        assert redis_client.exists(seen_key(unique_prefix, "A", "S", "m/S/1"))
        # a further delivery of the finished input is recognised before processing: nothing emitted
        source.push(envelope(1), token=4)
        wait_until(lambda: len(source.settled) == 4)
        assert len(publisher.published) == 4 and runner.stats.duplicates == 2
    finally:
        runner.drain()
        other.drain()
