"""The live monitor against real RabbitMQ (management API and passive declares), Redis (metric
entries written as operators/api.py specifies) and, slow, a Kafka-protocol broker (tansu)."""
from __future__ import annotations

import time
from typing import Callable, Dict

import pika
import pika.exceptions
import pytest

from operators.api import dead_hash, metrics_stream, processed_hash
from operators.wiring import declare, delete, wiring_for
from testbed.eventlog import EventLog
from testbed.live.metrics_reader import MetricsReader, Sample
from testbed.live.monitor import LiveMonitor, record_reading
from testbed.live.rabbit_management import ManagementClient, ManagementError, PassiveDepthReader, RunDepths
from testbed.model import HostView, InstanceState, InstanceView
from testbed.monitoring import SnapshotSettings, new_monitor_tables
from testbed.topology import Topology
from tests.conftest import compose_config

pytestmark = pytest.mark.integration

MANAGEMENT_URL = "http://127.0.0.1:15672"
RUN_START = 1_800_000_000.0  # epoch s of the (pretend) run start; sample times are written relative to it


@pytest.fixture(scope="module")
def cfg():
    return compose_config()


@pytest.fixture
def wired(rabbitmq_url, unique_prefix, cfg):
    """The run's exchanges and queues, declared as the runtime declares them; deleted afterwards."""
    wiring = wiring_for(cfg.topology, unique_prefix)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = conn.channel()
    declare(channel, wiring)
    yield wiring, channel
    try:
        cleanup = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
        delete(cleanup.channel(), wiring)
        cleanup.close()
    finally:
        if conn.is_open:
            conn.close()


def publish(channel, exchange: str, n: int) -> None:
    for i in range(n):
        channel.basic_publish(exchange=exchange, routing_key="", body=f"m{i}".encode())


def poll(read: Callable[[], RunDepths], want: Callable[[RunDepths], bool], timeout_s: float = 20.0) -> RunDepths:
    """The management API refreshes queue statistics every ~5 s: wait for the broker's view."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if want(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_depths_count_ready_and_unacked_per_operator_and_dead_letters(wired, rabbitmq_url):
    wiring, channel = wired
    publish(channel, wiring.exchange("S2_production"), 7)  # -> O1
    publish(channel, wiring.exchange("O1"), 5)  # fanout -> O3, O4, O5
    publish(channel, wiring.exchange("O3"), 3)  # -> O7
    publish(channel, wiring.exchange("O4"), 4)  # -> O7
    # a consumer holds 2 of O3's messages unacknowledged; O4's consumer rejects 1 (dead-lettered)
    held = [channel.basic_get(wiring.edge("O1", "O3").queue, auto_ack=False)[0] for _ in range(2)]
    assert all(m is not None for m in held)
    rejected, _, _ = channel.basic_get(wiring.edge("O1", "O4").queue, auto_ack=False)
    channel.basic_reject(rejected.delivery_tag, requeue=False)

    expected = {**{o: 0 for o in wiring.operators}, "O1": 7, "O3": 5, "O4": 4, "O5": 5, "O7": 7}
    client = ManagementClient(MANAGEMENT_URL, rabbitmq_url)
    got = poll(lambda: client.run_depths(wiring),
               lambda d: d.depths == expected and d.dead_letters.get("O4") == 1)
    assert got.depths == expected  # O3: 3 ready + 2 unacked
    assert got.dead_letters == {**{o: 0 for o in wiring.operators}, "O4": 1}
    assert got.missing == ()
    # the broker's own count of what entered each operator's queues (the reject does not undo it)
    got = poll(lambda: client.run_depths(wiring), lambda d: d.inflow == {**expected, "O4": 5, "O3": 5})
    assert got.inflow == {**{o: 0 for o in wiring.operators}, "O1": 7, "O3": 5, "O4": 5, "O5": 5, "O7": 7}

    # passive declares: exact at once, ready only (O3's 2 unacked are not counted)
    passive = PassiveDepthReader(rabbitmq_url)
    try:
        exact = passive.run_depths(wiring)
        assert exact.depths == {**expected, "O3": 3}
        assert exact.dead_letters["O4"] == 1 and exact.inflow is None
        assert passive.ready(f"{wiring.prefix}.no-such-queue") is None
        assert passive.run_depths(wiring).depths == exact.depths  # the channel survives a 404
    finally:
        passive.close()


def test_other_runs_queues_are_not_counted_and_undeclared_ones_are_missing(wired, rabbitmq_url, cfg):
    wiring, channel = wired
    # a run whose prefix extends ours must not leak in: the filter is "<prefix>." anchored
    other = wiring_for(cfg.topology, wiring.prefix + "x")
    declare(channel, other, ["S2_production"])
    try:
        publish(channel, other.exchange("S2_production"), 3)
        client = ManagementClient(MANAGEMENT_URL, rabbitmq_url)
        stats = client.queue_stats(wiring.prefix)
        assert set(stats) == set(wiring.queues()) | {e.dead_letter_queue for e in wiring.edges}
        fresh = wiring_for(cfg.topology, wiring.prefix + "-undeclared")
        got = client.run_depths(fresh)
        assert len(got.missing) == 2 * len(fresh.edges) and sum(got.depths.values()) == 0
    finally:
        delete(channel, other, ["S2_production"])


def test_bad_credentials_name_the_url(rabbitmq_url):
    client = ManagementClient(MANAGEMENT_URL, "amqp://guest:wrong@127.0.0.1:5672/%2F")
    with pytest.raises(ManagementError, match=r"http://127\.0\.0\.1:15672/api/queues/%2F.*HTTP 401.*'guest'"):
        client.queue_stats("anything")


# ---- Redis -----------------------------------------------------------------------------------

def write_metrics(redis, prefix: str, operator: str, instance: str, samples: int, processed: int, dead: int,
                  t0_ms: int) -> None:
    """What one runner flush writes (operators/api.py): samples, one count entry, the hashes."""
    pipe = redis.pipeline(transaction=False)
    for i in range(samples):
        pipe.xadd(metrics_stream(prefix), {"operator": operator, "instance": instance, "kind": "sample",
                                           "t_ms": t0_ms + i, "duration_ms": 100 + i % 7})
    pipe.xadd(metrics_stream(prefix), {"operator": operator, "instance": instance, "kind": "count",
                                       "t_ms": t0_ms + samples, "processed": processed, "dead": dead})
    if processed:
        pipe.hincrby(processed_hash(prefix), operator, processed)
    if dead:
        pipe.hincrby(dead_hash(prefix), operator, dead)
    pipe.execute()


def test_metrics_are_read_incrementally_in_bounded_calls(redis_client, unique_prefix):
    t0 = int(RUN_START * 1000)
    reader = MetricsReader(redis_client, unique_prefix, RUN_START, count=100)
    assert reader.read().entries == 0  # no stream yet
    write_metrics(redis_client, unique_prefix, "O3", "c1", 250, 2500, 2, t0 + 10_000)
    write_metrics(redis_client, unique_prefix, "O3", "c2", 49, 490, 0, t0 + 11_000)
    redis_client.xadd(metrics_stream(unique_prefix), {"operator": "O3", "kind": "sample"})  # malformed
    first = reader.read()
    assert first.entries == 250 + 1 + 49 + 1 + 1  # several XREAD calls of 100
    assert len(first.samples) == 299 and first.malformed == 1
    assert first.samples[0] == Sample(10.0, "O3", "c1", 100.0)
    assert first.processed == {"O3": 2990} and first.dead == {"O3": 2}

    write_metrics(redis_client, unique_prefix, "O7", "c3", 5, 50, 0, t0 + 20_000)
    second = reader.read()
    assert second.entries == 6 and [s.instance for s in second.samples] == ["c3"] * 5
    assert second.processed == {"O7": 50} and second.malformed == 0 and reader.malformed_total == 1
    assert reader.read().entries == 0
    assert reader.totals() == ({"O3": 2990, "O7": 50}, {"O3": 2})


def test_monitor_observes_builds_snapshots_and_event_log_rows(wired, rabbitmq_url, redis_client, unique_prefix,
                                                             cfg, tmp_path):
    """A monitoring step at the scale of the lead's benchmark (100 instances on 10 hosts) and its cost."""
    wiring, channel = wired
    topology = Topology.from_config(cfg.topology)
    settings = SnapshotSettings.from_config(cfg, 600.0)
    monitor = LiveMonitor(topology, wiring, ManagementClient(MANAGEMENT_URL, rabbitmq_url),
                          MetricsReader(redis_client, unique_prefix, RUN_START), settings, cfg.runtime.history,
                          cfg.runtime.monitoring_s)
    ops = topology.operators
    instances = tuple(
        InstanceView(f"c{i}", ops[i % len(ops)], f"h{i % 10}", InstanceState.running, 0.0) for i in range(100)
    )
    hosts = tuple(HostView(f"h{k}", 4096, 7168, 1000, 2000, 0.0, 600.0, frozenset(ops), True, 1.0)
                  for k in range(10))
    publish(channel, wiring.exchange("S2_production"), 9)
    t0 = int(RUN_START * 1000)
    # one 15 s interval: every instance flushed once a second, ~40 samples per second in all
    for sec in range(15):
        for inst in instances:
            sampled = 1 if (sec + int(inst.id[1:])) % 3 == 0 else 0
            write_metrics(redis_client, unique_prefix, inst.operator, inst.id, sampled, 10, 0, t0 + sec * 1000)
    poll(monitor.read_depths, lambda d: d.depths["O1"] == 9)

    reading = monitor.observe(15.0, {"S2_production": 187})  # the provider's items so far
    per_op = {o: sum(1 for i in instances if i.operator == o) for o in ops}
    assert reading.depths["O1"] == 9 and reading.missing_queues == ()
    assert reading.processed == {o: 15 * 10 * per_op[o] for o in ops}
    assert len(reading.samples) == 500 and reading.malformed == 0
    assert all(100.0 <= m <= 106.0 for m in reading.means.values())
    print(f"observe(): {reading.elapsed_s * 1000:.1f} ms: depths {reading.depths_s * 1000:.1f} ms "
          f"({2 * len(wiring.edges)} queues), metrics {reading.metrics_s * 1000:.1f} ms ({15 * 100 + 500} entries)")
    assert reading.elapsed_s < 1.0

    snap = monitor.snapshot(15.0, hosts, instances, {"O1": 1})
    assert snap.operators["O1"].queue == 9 and snap.operators["O1"].n == per_op["O1"]
    assert snap.operators["O1"].durations == (reading.means["O1"],) and snap.operators["O1"].scalings == 1
    assert snap.input_rate == 187 / 15.0 and snap.edge_items[("S2_production", "O1")] == 187
    assert snap.operators["O1"].received == 187 and snap.btu_s == 600.0 and list(snap.operators) == list(ops)

    tables = new_monitor_tables(samples=True)
    record_reading(tables, reading, ops, hosts, instances)
    second = monitor.observe(30.0, {"S2_production": 187})  # nothing new written: an interval without samples
    assert second.samples == () and sum(second.processed.values()) == 0
    assert monitor.snapshot(30.0, hosts, instances, {}).operators["O1"].durations == snap.operators["O1"].durations
    record_reading(tables, second, ops, hosts, instances)
    log = EventLog(tmp_path)
    for name, cols in tables.items():
        log.write(name, cols)
    assert log.read("queues").shape[0] == 2 * len(ops)
    assert log.read("samples").shape[0] == 500
    assert monitor.totals()[0] == {o: 15 * 10 * per_op[o] for o in ops}


# ---- Kafka -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_kafka_lag_per_operator(kafka_bootstrap, unique_prefix, cfg):
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    from testbed.live.kafka_lag import KafkaLagReader

    wiring = wiring_for(cfg.topology, unique_prefix)
    topic = wiring.topic("O1")  # edges O1 -> O3, O4, O5: three groups on one topic
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    reader = KafkaLagReader(kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        for i in range(12):
            producer.send(topic, f"m{i}".encode())
            # one record per batch: tansu's ListOffsets(latest) answers the last batch's base
            # offset + 1 (a 12-record batch would read as end offset 1); Apache Kafka does not
            producer.flush(30)
        producer.close()
        # O3's group has processed 5, O4's all 12, O5's has not committed yet
        admin.alter_group_offsets(wiring.edge("O1", "O3").consumer_group,
                                  {TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1)})
        admin.alter_group_offsets(wiring.edge("O1", "O4").consumer_group,
                                  {TopicPartition(topic, 0): OffsetAndMetadata(12, "", -1)})
        got: Dict[str, int] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = reader.run_depths(wiring).depths
            if (got["O3"], got["O4"], got["O5"]) == (7, 0, 12):
                break
            time.sleep(0.5)
        assert (got["O3"], got["O4"], got["O5"]) == (7, 0, 12)
        assert got["O1"] == 0  # its topic (S2_production) does not exist: nothing waits
        assert reader.run_depths(wiring).inflow["O5"] == 12
    finally:
        reader.close()
        admin.close()


def test_monitor_from_config_reads_the_configured_endpoints(wired, redis_client, unique_prefix, cfg):
    wiring, channel = wired
    topology = Topology.from_config(cfg.topology)
    publish(channel, wiring.exchange("O6"), 4)  # -> O8
    write_metrics(redis_client, unique_prefix, "O8", "c1", 2, 20, 1, int(RUN_START * 1000) + 5000)
    exact = LiveMonitor.from_config(cfg, topology, wiring, RUN_START, 600.0, redis=redis_client, exact_depths=True)
    try:
        reading = exact.observe(15.0)  # passive declares: no statistics refresh to wait for
        assert reading.depths["O8"] == 4 and reading.processed["O8"] == 20 and reading.dead["O8"] == 1
        assert [s.t_s for s in reading.samples] == [5.0, 5.001]
    finally:
        exact.close()
    default = LiveMonitor.from_config(cfg, topology, wiring, RUN_START, 600.0, redis=redis_client)
    assert isinstance(default.depth_source, ManagementClient)
    got = poll(default.read_depths, lambda d: d.depths["O8"] == 4)
    assert got.depths["O8"] == 4
