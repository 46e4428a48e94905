"""The runner's metrics flush against real Redis: the api's keys, and nothing lost when a flush fails."""
from __future__ import annotations

import pytest
import redis as redis_lib

from operators.api import dead_hash, emitted_hash, metrics_stream, processed_hash
from operators.metrics import Metrics

pytestmark = pytest.mark.integration


def test_a_failed_flush_keeps_everything_for_the_next(redis_client, unique_prefix):
    r = redis_client
    unreachable = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)  # nothing listens
    m = Metrics(unique_prefix, "O3", "O3-a", sample_every=2, clock=lambda: 1700000000.0)
    for k in range(4):  # the last two carry their origin: end-to-end latency goes with the sample
        m.completed(sent_ms=1000, amqp_timestamp_s=None, completed_ms=1010 + k, origin_ms=None if k < 2 else 500)
    m.processed(4)
    m.dead(1)
    m.defer_cumulative(4, 12)  # the runner's transaction with the finished ids failed
    assert m.flush(unreachable) is False
    m.processed(2)
    m.defer_cumulative(2, 6)
    assert m.flush(r) is True
    entries = [{k.decode(): v.decode() for k, v in f.items()} for _id, f in r.xrange(metrics_stream(unique_prefix))]
    # CPU time: no worker thread registered, but the test process's own children or cgroup may move
    assert entries[-1].pop("cpu_ms").isdigit()
    assert entries[-1].pop("run_delay_ms").isdigit()  # no busy period: only the children reaped meanwhile
    assert entries[-1].pop("container_cpu_ms", "0").isdigit()  # absent where no cgroup counter is readable
    assert entries == [
        {"operator": "O3", "instance": "O3-a", "kind": "sample", "t_ms": "1010", "duration_ms": "10"},
        {"operator": "O3", "instance": "O3-a", "kind": "sample", "t_ms": "1012", "duration_ms": "12",
         "latency_ms": "512"},
        {"operator": "O3", "instance": "O3-a", "kind": "count", "t_ms": "1700000000000", "processed": "6",
         "dead": "1", "emitted": "0", "busy_ms": "0"},
    ]
    assert r.hget(processed_hash(unique_prefix), "O3") == b"6"
    assert r.hget(emitted_hash(unique_prefix), "O3") == b"18"
    assert r.hget(dead_hash(unique_prefix), "O3") == b"1"
    assert m.flush(r) is True  # an empty interval: a count entry of zeros, hashes unchanged
    last = r.xrevrange(metrics_stream(unique_prefix), count=1)[0][1]
    assert (last[b"processed"], last[b"dead"]) == (b"0", b"0")
    assert r.hget(processed_hash(unique_prefix), "O3") == b"6"
