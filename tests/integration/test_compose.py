"""docker-compose.yml with the registry-free override: RabbitMQ (management), Redis and the
Kafka-protocol broker built from the local base (Debian's packages, tansu) by `infra/compose.sh up`
(= `make infra-up INFRA=compose COMPOSE_BUILD=1`), on free loopback ports, with credentials from
the environment; each service answers a real client, then `infra/compose.sh down` removes it all.
With cached images this takes ~20 s; the first run builds three small images (~30 s) and may
install Debian's docker-compose."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.request
import uuid

import pika
import pika.exceptions
import pytest
import redis as redis_lib

from .conftest import ROOT, free_port

pytestmark = pytest.mark.integration


def base_image() -> str:
    """The base the images build from: the official slim image where present, else the debootstrap one."""
    found = subprocess.run(["docker", "image", "inspect", "python:3.11-slim"], capture_output=True)
    return "python:3.11-slim" if found.returncode == 0 else "testbed-base:bookworm"


@pytest.mark.timeout(1800)
def test_compose_services_built_from_base_start_with_credentials_from_the_environment():
    project = f"tbtest{uuid.uuid4().hex[:8]}"
    ports = {k: free_port() for k in ("RABBITMQ_PORT", "RABBITMQ_MANAGEMENT_PORT", "REDIS_PORT", "KAFKA_PORT")}
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "COMPOSE_BUILD": "1",
           "COMPOSE_PROJECT_NAME": project, "RABBITMQ_DEFAULT_USER": "testbed", "RABBITMQ_DEFAULT_PASS": "s3cret",
           "REDIS_PASSWORD": "r3dis"}
    env.setdefault("BASE", base_image())
    script = ["bash", str(ROOT / "infra" / "compose.sh")]
    try:
        up = subprocess.run([*script, "up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
        assert up.returncode == 0, f"compose up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"

        # RabbitMQ: the configured user works through the port mapping, guest does not exist
        url = f"amqp://testbed:s3cret@127.0.0.1:{ports['RABBITMQ_PORT']}/%2F"
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"through compose")
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        assert body == b"through compose"
        conn.close()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{ports['RABBITMQ_PORT']}/%2F"))
        # the management plugin
        req = urllib.request.Request(f"http://127.0.0.1:{ports['RABBITMQ_MANAGEMENT_PORT']}/api/overview",
                                     headers={"Authorization": "Basic " + base64.b64encode(b"testbed:s3cret").decode()})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.load(resp)["rabbitmq_version"]

        # Redis: password required
        with pytest.raises(redis_lib.exceptions.AuthenticationError):
            redis_lib.Redis(port=ports["REDIS_PORT"]).set("k", "v")
        r = redis_lib.Redis(port=ports["REDIS_PORT"], password="r3dis")
        r.set("k", "v")
        assert r.get("k") == b"v"
        r.close()

        # Kafka protocol: produce, then read back without a consumer group (fast on tansu)
        from kafka import KafkaConsumer, KafkaProducer

        bootstrap = f"127.0.0.1:{ports['KAFKA_PORT']}"
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send("compose-check", b"kafka through compose").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("compose-check", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=20000)
        assert [m.value for m in consumer][:1] == [b"kafka through compose"]
        consumer.close()

        # every published port is on loopback only
        listed = subprocess.run(["docker", "ps", "--filter", f"label=com.docker.compose.project={project}",
                                 "--format", "{{.Ports}}"], capture_output=True, text=True, check=True).stdout
        published = [p for line in listed.splitlines() for p in line.split(", ") if "->" in p]
        assert len(published) == 4 and all(p.startswith("127.0.0.1:") for p in published), listed
    finally:
        subprocess.run([*script, "down"], cwd=ROOT, env=env, capture_output=True, timeout=300)
        subprocess.run(["docker", "volume", "rm", "-f", f"{project}_rabbitmq-data"], capture_output=True)
