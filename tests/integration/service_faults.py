"""Faults injected into the shared services during live runs, and their restoration: a test that
stops the broker or Redis never leaves it stopped for the tests after it."""
from __future__ import annotations

import socket
import subprocess
import time
from typing import Callable, Optional

import redis

from .conftest import redis_reachable, wait_for_rabbit


# Each rabbitmqctl call boots an Erlang VM before it acts: 1-2 s on a quiet machine, 13-40 s on one the
# tests keep busy (a priority does not shorten it here). A test that injects a broker fault therefore
# times what follows from when the broker went away, and gives the CLI time to act within the scenario.
def rabbitmqctl(*args: str, check: bool = True, timeout_s: float = 180) -> str:
    """RabbitMQ's CLI (quiet); its standard output."""
    done = subprocess.run(["rabbitmqctl", "-q", *args], check=check, capture_output=True, text=True,
                          timeout=timeout_s)
    return done.stdout


def restart_broker(outage_s: float, on_stopped: Optional[Callable[[], None]] = None) -> None:
    """Stop RabbitMQ's application for `outage_s` and start it again, in one CLI call evaluated on the
    broker's node: the CLI's boot comes before the outage, not inside it; `on_stopped` runs once the
    broker refuses connections."""
    ms = int(outage_s * 1000)
    cli = subprocess.Popen(["rabbitmqctl", "-q", "eval", f"ok = rabbit:stop(), timer:sleep({ms}), rabbit:start()."],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while _accepts(5672) and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if on_stopped is not None:
            on_stopped()
        out, _ = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
    if cli.returncode != 0:
        raise RuntimeError(f"rabbitmqctl eval (stop, {outage_s} s, start) failed: {out.strip()}")
    rabbitmqctl("await_startup")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def restore_broker(url: str, stopped: bool) -> None:
    if stopped:
        rabbitmqctl("start_app", check=False)
    wait_for_rabbit(url)


def restart_redis(url: str) -> None:
    """Shut Redis down without saving and start it again with the settings it ran with (those of
    infra/services.sh: no RDB, no AOF), as a crash and a restart by the script would."""
    client = redis.Redis.from_url(url)
    conf = {k: client.config_get(k)[k] for k in ("port", "bind", "dir", "logfile", "pidfile", "save", "appendonly")}
    try:
        client.shutdown(nosave=True)
    except redis.exceptions.ConnectionError:
        pass  # it closed the connection on its way out
    client.close()
    deadline = time.monotonic() + 30
    while redis_reachable(url):
        if time.monotonic() > deadline:
            raise TimeoutError("Redis did not stop")
        time.sleep(0.1)
    subprocess.run(["redis-server", "--daemonize", "yes", "--port", conf["port"], "--bind", conf["bind"],
                    "--dir", conf["dir"], "--save", conf["save"], "--appendonly", conf["appendonly"],
                    "--logfile", conf["logfile"], "--pidfile", conf["pidfile"]], check=True, timeout=60)


def restore_redis(url: str) -> None:
    """Redis back after a restart test: it comes back by itself within seconds, else the project's script starts it."""
    deadline = time.monotonic() + 10
    while not redis_reachable(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not redis_reachable(url):
        subprocess.run(["bash", "infra/services.sh", "start"], capture_output=True, timeout=300)
