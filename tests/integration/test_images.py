"""Each operator image (testbed-o1 ... testbed-o9) in a container against the real broker and Redis.

For every operator type: build the images (``infra/images.sh``, the script behind ``make images``;
with a warm build cache a rebuild after a code change takes ~20 s, a cold build of the base, the
common layers, tesseract and fpdf2 several minutes), start a container of the image on the host
network with a run prefix of its own, publish one suitable input to the operator's input
exchange(s) and wait for its output on the downstream queue (O8, the sink: its latency entry in
Redis). The container must run as the unprivileged user the image declares. Containers, queues and
Redis keys are removed afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from typing import Dict, List, Tuple

import pika
import pika.exceptions
import pytest
import redis as redis_lib

from operators.envelope import Envelope, amqp_properties, image_payload
from operators.topology import oee_topology
from operators.wiring import Wiring, declare, delete, make_wiring

pytestmark = pytest.mark.integration

OPERATORS = [f"O{i}" for i in range(1, 10)]
IMAGE_USER_UID = 10001
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
BUILD_TIMEOUT_S = 3600  # a cold build: the debootstrap base, pip, tesseract
OUTPUT_TIMEOUT_S = 90.0


def image_name(op: str) -> str:
    return f"testbed-{op.lower()}:latest"


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="session")
def redis_client(rabbitmq_url):  # rabbitmq_url: infra/services.sh start has started Redis too
    client = redis_lib.Redis.from_url(REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def run(rabbitmq_url, redis_client, unique_prefix):
    """The run's wiring (every exchange and queue of the OEE topology declared), a channel, and
    cleanup of containers, broker names and Redis keys."""
    topo = oee_topology()
    wiring = make_wiring(topo["sources"], topo["operators"], unique_prefix)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = conn.channel()
    channel.confirm_delivery()
    declare(channel, wiring)
    containers: List[str] = []
    yield wiring, channel, containers
    for name in containers:
        docker("rm", "-f", name, check=False)
    try:
        conn.close()
    except pika.exceptions.AMQPError:  # gone (another test may have restarted the broker)
        pass
    cleanup = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))  # a fresh one for the cleanup
    delete(cleanup.channel(), wiring)
    cleanup.close()
    keys = list(redis_client.scan_iter(match=f"{unique_prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


def start_container(op: str, wiring: Wiring, containers: List[str], rabbitmq_url: str,
                    params: Dict | None = None) -> str:
    name = f"{wiring.prefix}-{op.lower()}"[:120]
    env = {"RUN_PREFIX": wiring.prefix, "TRANSPORT": "rabbitmq", "AMQP_URL": rabbitmq_url, "REDIS_URL": REDIS_URL,
           "INSTANCE_ID": name, "SAMPLE_EVERY": "1", "METRICS_FLUSH_S": "0.2", "DRAIN_TIMEOUT_S": "5"}
    if params:
        env["OPERATOR_PARAMS"] = json.dumps(params)
    args = ["run", "-d", "--name", name, "--network", "host"]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    containers.append(name)
    docker(*args, image_name(op))
    return name


def publish(channel, wiring: Wiring, producer: str, env: Envelope) -> None:
    channel.basic_publish(exchange=wiring.exchange(producer), routing_key="", body=env.encode(),
                          properties=pika.BasicProperties(**amqp_properties(env)), mandatory=True)


def wait_for_output(channel, queue: str, container: str) -> Envelope:
    deadline = time.monotonic() + OUTPUT_TIMEOUT_S
    while time.monotonic() < deadline:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return Envelope.decode(body)
        state = docker("inspect", "-f", "{{.State.Status}}", container).stdout.strip()
        if state != "running":
            raise AssertionError(f"container {container} is {state}:\n{logs(container)}")
        time.sleep(0.2)
    raise AssertionError(f"no output on {queue} after {OUTPUT_TIMEOUT_S:.0f} s; container log:\n{logs(container)}")


def logs(container: str) -> str:
    done = docker("logs", "--tail", "60", container, check=False)
    return done.stdout + done.stderr


def process_uid(container: str) -> Tuple[int, str]:
    """The real uid of the container's main process (the runner) and the image's configured user."""
    status = docker("exec", container, "cat", "/proc/1/status").stdout
    uid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
    user = docker("inspect", "-f", "{{.Config.User}}", container).stdout.strip()
    return uid, user


def now_ms() -> int:
    return int(time.time() * 1000)


def production_record(record_id: str, machine: str, produced: int = 45, defective: int = 2) -> Dict:
    return {"record_id": record_id, "machine_id": machine, "machine_type": "cnc milling",
            "location": "hall 1 line 2", "produced_units": produced, "defective_units": defective,
            "planned_production_time_s": 60, "status": "available", "timestamp_ms": now_ms()}


def part(record_id: str, machine: str, name: str, value: float) -> Dict:
    return {"record_id": record_id, "machine_id": machine, "part": name, "value": value, "timestamp_ms": now_ms()}


@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
@pytest.mark.parametrize("op", OPERATORS)
def test_operator_image_processes_one_message(op, operator_images, run, rabbitmq_url, redis_client):
    wiring, channel, containers = run
    machine = "machine-02"
    origin = now_ms()
    item_id = f"{machine}/{op}-input/{uuid.uuid4().hex[:6]}"
    labels = json.loads(docker("image", "inspect", "-f", "{{json .Config.Labels}}", operator_images[op]).stdout)
    assert labels.get("testbed.operator") == op
    params = {"batch_size": 1} if op == "O9" else None  # one report per OEE value
    container = start_container(op, wiring, containers, rabbitmq_url, params)

    def envelope(type_: str, payload: Dict, suffix: str = "") -> Envelope:
        return Envelope(item_id + suffix, machine, type_, origin, now_ms(), payload)

    if op == "O1":
        from data_provider.display_image import render_display
        from testbed.workloads.payloads import ProductionRecord

        shown = ProductionRecord(machine_id=machine, machine_type="cnc milling", location="hall 1 line 2",
                                 produced_units=47, defective_units=3, planned_production_time_s=60,
                                 status="available", timestamp_ms=origin)
        publish(channel, wiring, "S2_production", envelope("production", image_payload(render_display(shown))))
        outs = [wait_for_output(channel, wiring.edge("O1", d).queue, container) for d in ("O3", "O4", "O5")]
        for out in outs:  # the fanout: one record, copied to O3, O4 and O5
            assert out.type == "production_record"
            assert out.payload["record_id"] == item_id
            assert (out.payload["produced_units"], out.payload["defective_units"]) == (47, 3)
            assert out.payload["status"] == "available" and out.payload["machine_type"] == "cnc milling"
            assert out.payload["timestamp_ms"] == origin
    elif op == "O2":
        publish(channel, wiring, "S1_availability",
                envelope("availability", {"machine_id": machine, "status": "defect", "timestamp_ms": origin}))
        out = wait_for_output(channel, wiring.edge("O2", "O8").queue, container)
        assert out.type == "warning" and out.payload["kind"] == "defect" and out.payload["machine_id"] == machine
    elif op in ("O3", "O4", "O5"):
        publish(channel, wiring, "O1", envelope("production_record", production_record(item_id, machine)))
        want = {"O3": "performance", "O4": "availability", "O5": "quality"}[op]
        out = wait_for_output(channel, wiring.edge(op, "O7").queue, container)
        assert out.type == want and out.payload["part"] == want and out.payload["record_id"] == item_id
        assert 0.0 <= out.payload["value"] <= 1.0
        if op == "O5":
            assert out.payload["value"] == pytest.approx((45 - 2) / 45)
    elif op == "O6":
        publish(channel, wiring, "S3_temperature",
                envelope("temperature", {"machine_id": machine, "temperature_c": 107.5, "timestamp_ms": origin}))
        out = wait_for_output(channel, wiring.edge("O6", "O8").queue, container)
        assert out.type == "warning" and out.payload["kind"] == "temperature"
        assert out.payload["value"] == pytest.approx(107.5)
    elif op == "O7":
        for producer, name, value in (("O3", "performance", 0.9), ("O4", "availability", 0.8), ("O5", "quality", 0.5)):
            publish(channel, wiring, producer, envelope(name, part(item_id, machine, name, value), f"/{producer}"))
        out = wait_for_output(channel, wiring.edge("O7", "O9").queue, container)
        assert out.type == "oee" and out.payload["record_id"] == item_id
        assert out.payload["oee"] == pytest.approx(0.9 * 0.8 * 0.5)
    elif op == "O8":
        publish(channel, wiring, "O2", envelope("warning", {
            "kind": "defect", "machine_id": machine, "incident": 1, "since_ms": origin, "message": "defect"}))
        stream = f"{wiring.prefix}:latency"
        deadline = time.monotonic() + OUTPUT_TIMEOUT_S
        entries = []
        while not entries and time.monotonic() < deadline:
            entries = redis_client.xrange(stream)
            time.sleep(0.2)
        assert entries, f"no latency entry in {stream}; container log:\n{logs(container)}"
        fields = {k.decode(): v.decode() for k, v in entries[0][1].items()}
        assert fields["item"] == item_id and int(fields["origin_ms"]) == origin
        assert int(fields["latency_ms"]) >= 0
    elif op == "O9":
        value = {"record_id": item_id, "machine_id": machine, "availability": 0.8, "performance": 0.9,
                 "quality": 0.5, "oee": 0.36, "timestamp_ms": origin}
        publish(channel, wiring, "O7", envelope("oee", value))
        out = wait_for_output(channel, wiring.edge("O9", "O8").queue, container)
        assert out.type == "report" and out.payload["inputs"] == 1
        assert out.payload["mean_oee"] == pytest.approx(0.36)
        # the PDF (fpdf2, only in this image) exists inside the container
        pdf = docker("exec", container, "head", "-c", "5", out.payload["path"]).stdout
        assert pdf == "%PDF-"

    # the runner counted the item (all inputs of O7: three)
    deadline = time.monotonic() + 10
    expected = 3 if op == "O7" else 1
    while time.monotonic() < deadline:
        processed = int(redis_client.hget(f"{wiring.prefix}:processed", op) or 0)
        if processed >= expected:
            break
        time.sleep(0.2)
    assert processed == expected, logs(container)

    uid, user = process_uid(container)
    assert uid == IMAGE_USER_UID != 0, f"the runner runs as uid {uid}"
    assert user.split(":")[0] == str(IMAGE_USER_UID)


@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib.resources calls
def test_operator_image_on_kafka(operator_images, kafka_bootstrap, unique_prefix, redis_client):
    """The images carry the Kafka client too: O3 with TRANSPORT=kafka against the Kafka-protocol
    broker (tansu; its consumer-group join takes ~20 s)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from operators.transports import create_topics

    topo = oee_topology()
    wiring = make_wiring(topo["sources"], topo["operators"], unique_prefix)
    create_topics(kafka_bootstrap, [wiring.topic("O1"), wiring.topic("O3")])
    machine, item_id = "machine-05", f"machine-05/kafka/{uuid.uuid4().hex[:6]}"
    env = Envelope(item_id, machine, "production_record", now_ms(), now_ms(), production_record(item_id, machine))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(wiring.topic("O1"), env.encode()).get(timeout=30)
    producer.close()

    name = f"{unique_prefix}-o3-kafka"[:120]
    try:
        docker("run", "-d", "--name", name, "--network", "host", "-e", f"RUN_PREFIX={unique_prefix}",
               "-e", "TRANSPORT=kafka", "-e", f"KAFKA_BOOTSTRAP={kafka_bootstrap}", "-e", f"REDIS_URL={REDIS_URL}",
               "-e", f"INSTANCE_ID={name}", operator_images["O3"])
        consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
        tp = TopicPartition(wiring.topic("O3"), 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: List[Envelope] = []
        deadline = time.monotonic() + OUTPUT_TIMEOUT_S
        try:
            while not got and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(Envelope.decode(r.value) for r in records)
                state = docker("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
                assert state == "running", f"container {name} is {state}:\n{logs(name)}"
        finally:
            consumer.close()
        assert got, f"nothing on {wiring.topic('O3')} after {OUTPUT_TIMEOUT_S:.0f} s:\n{logs(name)}"
        assert got[0].type == "performance" and got[0].payload["record_id"] == item_id
        assert process_uid(name)[0] == IMAGE_USER_UID
    finally:
        docker("rm", "-f", name, check=False)
        keys = list(redis_client.scan_iter(match=f"{unique_prefix}:*", count=1000))
        if keys:
            redis_client.delete(*keys)
