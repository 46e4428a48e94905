"""The operator runner (``python -m operators.runner``) started while its broker is away, as the
watchdog's replacement of a killed instance is during a broker restart: it waits without a deadline
and consumes once the broker is back, or ends with status 0 when stopped while it waits. The broker
goes and comes back as a TCP gate in front of the real RabbitMQ (seconds, not a broker restart). The
emulated-network live run with a replacement during a long broker outage is
tests/integration/test_live_odp_faults.py; the waits themselves, tests/unit/test_runner_broker_away.py."""
from __future__ import annotations

import signal
import socket
import threading
from typing import List, Optional
from urllib.parse import urlparse

import pika
import pytest

from operators.api import processed_hash
from operators.transports import declare_wiring
from operators.wiring import delete, make_wiring

from .conftest import free_port
from .runner_helpers import RunnerProcess, drain, items, publish, queue_state, runner_env, wait_for

pytestmark = pytest.mark.integration

ONE_STAGE = {"sources": {"S": ["A"]}, "operators": {"A": ["sink"], "sink": []}}


class Gate:
    """A TCP port that refuses connections (the broker away) until `open`, then forwards them to the
    broker (back)."""

    def __init__(self, target_url: str):
        target = urlparse(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 5672)
        self.port = free_port()
        user = f"{target.username}:{target.password}@" if target.username else ""
        self.url = target._replace(netloc=f"{user}127.0.0.1:{self.port}").geturl()  # the runner's broker
        self._server: Optional[socket.socket] = None
        self._sockets: List[socket.socket] = []

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for s in [self._server, *self._sockets]:
            if s is not None:
                s.close()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture
def gated(rabbitmq_url, unique_prefix, redis_client, tmp_path):
    """(the gate, the wiring on the real broker, a function starting runner A through the gate)."""
    wiring = make_wiring(ONE_STAGE["sources"], ONE_STAGE["operators"], unique_prefix)
    declare_wiring(rabbitmq_url, wiring)
    gate, procs = Gate(rabbitmq_url), []

    def start() -> RunnerProcess:
        env = runner_env("A", unique_prefix, ONE_STAGE, AMQP_URL=gate.url, OPERATOR_IMPL="passthrough")
        procs.append(RunnerProcess(env, tmp_path / "A.log"))
        return procs[-1]

    yield gate, wiring, start
    for p in procs:
        p.stop()
    gate.close()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    delete(conn.channel(), wiring)
    conn.close()


def test_a_runner_started_while_the_broker_is_away_waits_and_consumes_once_it_is_back(gated, rabbitmq_url,
                                                                                    redis_client, unique_prefix):
    gate, wiring, start = gated
    runner = start()
    wait_for("the runner to find the broker away", lambda: "not reachable" in runner.log(), proc=runner)
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = conn.channel()
    channel.confirm_delivery()
    inp, out = wiring.edge("S", "A").queue, wiring.edge("A", "sink").queue
    publish(channel, wiring.exchange("S"), items(20))  # what waits for it meanwhile
    gate.open()  # the broker is back
    wait_for("20 outputs", lambda: queue_state(channel, out)[0] == 20, proc=runner)
    wait_for("the processed count", lambda: redis_client.hget(processed_hash(unique_prefix), "A") == b"20",
             proc=runner)
    runner.signal(signal.SIGTERM)
    assert runner.wait(30) == 0, runner.log()
    assert queue_state(channel, inp) == (0, 0) and len(drain(channel, out)) == 20
    conn.close()


def test_a_runner_stopped_while_it_waits_for_the_broker_ends_with_status_0(gated):
    _gate, _wiring, start = gated
    runner = start()
    wait_for("the runner to find the broker away", lambda: "not reachable" in runner.log(), proc=runner)
    runner.signal(signal.SIGTERM)
    assert runner.wait(30) == 0, runner.log()
