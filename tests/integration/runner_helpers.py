"""Helpers of the runner's integration tests: runner subprocesses, publishing, draining queues."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

import pika

from operators.envelope import Envelope, amqp_properties

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class RunnerProcess:
    """``python -m operators.runner`` with the given environment, its stderr in ``log_path``."""

    def __init__(self, env: Mapping[str, str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "operators.runner"], cwd=ROOT,
                                     env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


def runner_env(operator: str, prefix: str, topology: Mapping[str, Any], **extra: Any) -> Dict[str, str]:
    env = {"OPERATOR": operator, "RUN_PREFIX": prefix, "TOPOLOGY": json.dumps(topology), "REDIS_URL": REDIS_URL,
           "INSTANCE_ID": f"{operator}-test", "METRICS_FLUSH_S": "0.2"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 30.0,
             proc: Optional[RunnerProcess] = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.proc.poll() is not None:
            raise AssertionError(f"runner exited ({proc.proc.returncode}) before {what}:\n{proc.log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timeout waiting for {what}" + (f":\n{proc.log()}" if proc else ""))
        time.sleep(0.05)


def queue_state(channel: Any, queue: str) -> tuple:
    """(messages ready, consumers) of a queue."""
    ok = channel.queue_declare(queue=queue, passive=True).method
    return ok.message_count, ok.consumer_count


def publish(channel: Any, exchange: str, envelopes: List[Envelope]) -> None:
    """Persistent, confirmed (the channel is in confirm mode)."""
    for env in envelopes:
        channel.basic_publish(exchange, "", env.encode(), pika.BasicProperties(**amqp_properties(env)))


def drain(channel: Any, queue: str) -> List[Envelope]:
    out = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append(Envelope.decode(body))


def items(n: int, source: str = "S", start: int = 0) -> List[Envelope]:
    now = int(time.time() * 1000)
    return [Envelope(f"machine-01/{source}/{i}/0", "machine-01", "reading", now, now, {"n": i})
            for i in range(start, start + n)]


def interrupt_experiment(args: List[str], cwd: Path, started: Callable[[], bool], settle_s: float,
                         start_timeout_s: float = 180.0) -> tuple:
    """Start `testbed experiment ARGS` in a process, wait until `started()` (its containers run),
    let items flow for settle_s, send SIGINT as Ctrl-C does; (return code, output)."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "experiment", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + start_timeout_s
        while not started():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the run's containers did not start"
            time.sleep(0.5)
        time.sleep(settle_s)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output
