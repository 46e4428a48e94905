"""An instance that starts while the broker is away (a replacement during a broker restart): it
waits without a deadline, as a running instance reconnects, and a stop meanwhile ends it with status
0 (it holds nothing). Here against a port nothing listens on; the runner process against a broker
that comes back is tests/integration/test_runner_broker_away.py."""
from __future__ import annotations

import threading
import time

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from operators.api import OperatorContext
from operators.runner import Runner
from operators.runner_config import RunnerConfig
from operators.sources import RabbitSource
from operators.transports import BrokerUnreachable, RabbitPublisher, StartCancelled, declare_wiring, wait_ready
from tests.unit.runner_fakes import TOPOLOGY, FlagStore, HandPublisher, HandSource, Twice

AWAY = "amqp://guest:guest@127.0.0.1:1/%2F"  # nothing listens there: every connection is refused


def test_a_wait_without_a_deadline_ends_when_ready_or_cancelled_and_one_with_a_deadline_at_it():
    ready, cancel = threading.Event(), threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(StartCancelled, match="stopped while waiting: the broker"):
        wait_ready(ready, None, cancel, lambda: "the broker")
    assert time.monotonic() - t0 >= 0.45
    with pytest.raises(BrokerUnreachable, match="the broker within 0 s"):
        wait_ready(threading.Event(), 0.0, None, lambda: "the broker")
    ready.set()
    wait_ready(ready, None, None, lambda: "the broker")


def test_a_declaration_without_a_deadline_tries_again_until_cancelled():
    wiring = RunnerConfig(operator="A", prefix="p", topology=TOPOLOGY).wiring()
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(StartCancelled):
        declare_wiring(AWAY, wiring, timeout_s=None, cancel=cancel)
    assert time.monotonic() - t0 >= 0.9
    with pytest.raises(BrokerUnreachable, match="not reachable within 0 s"):
        declare_wiring(AWAY, wiring, timeout_s=0.0)  # one attempt (the live runtime's, between its checks)


@pytest.mark.parametrize("waiting", ["publisher", "source"])
def test_a_runner_stopped_while_it_waits_for_the_broker_ends_with_status_0(waiting):
    cfg = RunnerConfig(operator="A", prefix="p", topology=TOPOLOGY, dedup_ttl_s=0, metrics_flush_s=3600,
                       drain_timeout_s=5, parallel=2, activation_poll_s=0)
    wiring = cfg.wiring()
    redis = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    publisher = (RabbitPublisher(AWAY, wiring, ("A",), declare=False, reconnect_max_s=0.2) if waiting == "publisher"
                 else HandPublisher())
    source = (RabbitSource(AWAY, wiring.inputs("A"), 5, reconnect_max_s=0.2) if waiting == "source"
              else HandSource(wiring.inputs("A")))
    runner = Runner(cfg, Twice(OperatorContext("A", "a-1", "p", redis)), source, publisher, redis,
                    activation=FlagStore())
    status = []
    thread = threading.Thread(target=lambda: status.append(runner.run(timeout_s=None)), daemon=True)
    thread.start()
    thread.join(1.5)
    assert thread.is_alive()  # no deadline: still waiting for the broker
    runner.request_stop()  # SIGTERM
    thread.join(20)
    assert status == [0] and runner.held() == 0


def test_the_runner_process_waits_for_an_absent_broker_and_a_sigterm_ends_it_with_status_0(tmp_path):
    """`python -m operators.runner` as the container starts it: it declares its queues before its
    SIGTERM handler is installed, and the stop then ends it at once with status 0."""
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "OPERATOR": "A", "RUN_PREFIX": "p", "TOPOLOGY": json.dumps(TOPOLOGY), "AMQP_URL": AWAY,
           "REDIS_URL": "redis://127.0.0.1:1/0", "INSTANCE_ID": "a-1", "OPERATOR_IMPL": "passthrough"}
    log = tmp_path / "runner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "operators.runner"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60  # the interpreter's start on a loaded machine
            while "not reachable" not in log.read_text(errors="replace"):
                assert proc.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.1)
            time.sleep(1.0)
            assert proc.poll() is None  # still trying
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text(errors="replace")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
