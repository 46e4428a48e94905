"""Pool activation on Kafka against a real Kafka-protocol broker (tansu) and Redis: a replica
switched off commits what it finished and leaves the consumer group, so the active member gets
its partitions; switched on, it joins again and gets work. Slow: every group change is a
rebalance (~20 s on tansu)."""
from __future__ import annotations

import signal
import time

import pytest

from operators.api import ACTIVE, INACTIVE, InstanceReport, activation_key, instance_state_hash, processed_hash
from operators.transports import create_topics
from operators.wiring import make_wiring
from testbed.live.metrics_reader import MetricsReader

from .runner_helpers import RunnerProcess, items, runner_env, wait_for

# kafka-python reads its protocol schemas with deprecated importlib.resources calls
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOPOLOGY = {"sources": {"S": ["A"]}, "operators": {"A": ["sink"], "sink": []}}
REBALANCE_S = 120.0  # a group change on tansu takes ~20 s; on a loaded machine several of them


def test_a_kafka_replica_switched_off_leaves_its_group_and_joins_again_when_switched_on(
        kafka_bootstrap, redis_client, unique_prefix, tmp_path):
    from kafka import KafkaProducer

    r = redis_client
    wiring = make_wiring(TOPOLOGY["sources"], TOPOLOGY["operators"], unique_prefix)
    create_topics(kafka_bootstrap, [wiring.topic("S")], partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    sent = 0

    def publish(n: int) -> None:
        nonlocal sent
        for i, env in enumerate(items(n, start=sent)):
            producer.send(wiring.topic("S"), env.encode(), partition=i % 2)  # both partitions get work
        producer.flush(30)
        sent += n

    def processed() -> int:
        return int(r.hget(processed_hash(unique_prefix), "A") or 0)

    def state(name: str):
        report = InstanceReport.decode(r.hget(instance_state_hash(unique_prefix), name))
        return report.state if report else None

    reader = MetricsReader(r, unique_prefix, run_start_s=0.0)
    per_instance = {}

    def read_activity() -> dict:
        for name, activity in reader.read().instances.items():
            per_instance[name] = per_instance.get(name, 0) + activity.processed
        return dict(per_instance)

    pool = {name: RunnerProcess(runner_env("A", unique_prefix, TOPOLOGY, OPERATOR_IMPL="passthrough",
                                           TRANSPORT="kafka", KAFKA_BOOTSTRAP=kafka_bootstrap, PREFETCH=5,
                                           ACTIVATION_POLL_S=0.1, WORK_MS=50, INSTANCE_ID=name),
                                tmp_path / f"{name}.log")
            for name in ("A-0", "A-1")}
    try:
        publish(100)  # 50 per partition, 2.5 s of work each: the switch-off comes while both work
        wait_for("work under way", lambda: processed() >= 20, timeout_s=REBALANCE_S, proc=pool["A-0"])

        r.set(activation_key(unique_prefix, "A-1"), "0")
        wait_for("A-1 to report inactive", lambda: state("A-1") == INACTIVE, timeout_s=REBALANCE_S,
                 proc=pool["A-1"])
        time.sleep(1.0)  # its last count entry (flushed every 0.2 s) is in the stream
        at_switch_off = read_activity().get("A-1", 0)
        # A-0 gets A-1's partition after the rebalance, from its commit: the handed back inputs too
        wait_for("the inputs of both partitions", lambda: processed() == 100, timeout_s=REBALANCE_S,
                 proc=pool["A-0"])
        assert read_activity().get("A-1", 0) == at_switch_off  # nothing while switched off

        r.set(activation_key(unique_prefix, "A-1"), "1")
        wait_for("A-1 to report active", lambda: state("A-1") == ACTIVE, proc=pool["A-1"])
        deadline = time.monotonic() + REBALANCE_S
        while read_activity().get("A-1", 0) == at_switch_off:  # work on both partitions until A-1 has one
            assert time.monotonic() < deadline and pool["A-1"].proc.poll() is None, pool["A-1"].log()
            publish(10)
            time.sleep(1.0)
        try:
            wait_for("every input", lambda: processed() == sent, timeout_s=REBALANCE_S, proc=pool["A-0"])
        except AssertionError as exc:  # an input left behind may be either replica's: both logs
            left = f"processed {read_activity()} of {sent}"
            raise AssertionError(f"{exc}\n{left}\n--- A-1\n{pool['A-1'].log()}") from None
        for p in pool.values():
            p.signal(signal.SIGTERM)
            assert p.wait(30) == 0, p.log()
        assert processed() == sent and sum(read_activity().values()) == sent  # none lost, none twice
    finally:
        producer.close()
        for p in pool.values():
            p.stop()
