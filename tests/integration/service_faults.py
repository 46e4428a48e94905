"""Faults injected into the shared services during live runs, and their restoration: a test that
stops the broker or Redis never leaves it stopped for the tests after it."""
from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

import redis

from .conftest import redis_reachable, wait_for_rabbit


# Each rabbitmqctl call boots an Erlang VM before it acts: 1-2 s on a quiet machine, 13-40 s on one the
# tests keep busy (a priority does not shorten it here). Broker outages are therefore one call
# (`BrokerOutage`), never a stop and a start whose boots would lengthen the outage, and tests read
# queues from the management API rather than from the CLI.
def rabbitmqctl(*args: str, check: bool = True, timeout_s: float = 180) -> str:
    """RabbitMQ's CLI (quiet); its standard output."""
    done = subprocess.run(["rabbitmqctl", "-q", *args], check=check, capture_output=True, text=True,
                          timeout=timeout_s)
    return done.stdout


class BrokerOutage:
    """RabbitMQ's application stopped from `begin()` until `end()`, by one CLI call evaluated on the
    broker's node: it waits for a stop file, stops the application, waits for a release file and starts
    it again. `arm()` starts that call ahead of the fault, so that the CLI's boot (an Erlang VM: 13-40 s
    on a loaded machine) is over before the fault is due; the outage then begins within a tick of
    `begin()` and lasts exactly until `end()`, whatever the test does meanwhile. The node gives up a
    stop never asked for after `arm_limit_s`, and starts the application by itself `limit_s` after it
    stopped it, so a test that dies never leaves the broker stopped.

        with BrokerOutage(url) as outage:   # returns once the broker refuses connections
            ...                             # the faults injected while it is away
        # here RabbitMQ accepts connections again
    """

    def __init__(self, url: str, limit_s: float = 600.0, arm_limit_s: float = 1800.0):
        self.url = url
        files = Path(tempfile.gettempdir()) / f"testbed-broker-{uuid.uuid4().hex}"
        self.stop_file, self.release_file = files.with_suffix(".stop"), files.with_suffix(".release")
        self.ready_file = files.with_suffix(".ready")  # written by the node once the call runs there
        self.expression = (
            f'ok = file:write_file("{self.ready_file}", <<>>), '
            "Wait = fun W(F, Until) -> case filelib:is_file(F) of true -> ok; false -> "
            "case erlang:monotonic_time(millisecond) > Until of true -> timeout; false -> "
            "timer:sleep(50), W(F, Until) end end end, "
            "Now = fun() -> erlang:monotonic_time(millisecond) end, "
            f'case Wait("{self.stop_file}", Now() + {int(arm_limit_s * 1000)}) of '
            f'ok -> ok = rabbit:stop(), Wait("{self.release_file}", Now() + {int(limit_s * 1000)}), rabbit:start(); '
            "timeout -> not_stopped end.")
        self.cli: Optional[subprocess.Popen] = None

    def arm(self) -> "BrokerOutage":
        if self.cli is None:
            self.cli = subprocess.Popen(["rabbitmqctl", "-q", "eval", self.expression], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        return self

    def wait_armed(self, timeout_s: float = 180.0) -> "BrokerOutage":
        """Until the call runs on the node (the CLI has booted): from then on `begin()` takes a tick."""
        self.arm()
        deadline = time.monotonic() + timeout_s
        while not self.ready_file.exists():
            self._check_running()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker's CLI did not start within {timeout_s:.0f} s")
            time.sleep(0.05)
        return self

    def begin(self, timeout_s: float = 180.0) -> "BrokerOutage":
        if not _accepts(5672):
            raise RuntimeError("RabbitMQ is not running: there is no outage to begin")
        self.arm()
        self.stop_file.touch()
        deadline = time.monotonic() + timeout_s
        try:
            while _accepts(5672):
                self._check_running()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"RabbitMQ still accepted connections {timeout_s:.0f} s after begin()")
                time.sleep(0.05)
        except BaseException:
            self.end()  # a broker the CLI stops later is released at once
            raise
        return self

    def _check_running(self) -> None:
        if self.cli is not None and self.cli.poll() is not None:
            raise RuntimeError(f"rabbitmqctl eval (stop, wait, start) ended early: {self.cli.stdout.read().strip()}")

    def end(self, timeout_s: float = 180.0) -> None:
        """Release the broker and wait until it accepts AMQP connections again (an outage never begun:
        the armed call is dropped)."""
        if not self.stop_file.exists():
            self.disarm()
            return
        self.release_file.touch()
        try:
            if self.cli is not None:
                out, _ = self.cli.communicate(timeout=timeout_s)
                if self.cli.returncode != 0:
                    raise RuntimeError(f"rabbitmqctl eval (stop, wait, start) failed: {out.strip()}")
        finally:
            if self.cli is not None and self.cli.poll() is None:
                self.cli.kill()
            wait_for_rabbit(self.url, timeout_s)
            self._remove_files()

    def disarm(self) -> None:
        """Drop an armed call whose outage never began (its waiting ends on the node at `arm_limit_s`)."""
        if self.cli is not None and self.cli.poll() is None:
            self.cli.kill()
            self.cli.wait()
        self._remove_files()

    def _remove_files(self) -> None:
        for f in (self.stop_file, self.release_file, self.ready_file):
            f.unlink(missing_ok=True)

    def __enter__(self) -> "BrokerOutage":
        return self.begin()

    def __exit__(self, *exc_info) -> None:
        self.end()


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
