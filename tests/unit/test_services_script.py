"""infra/services.sh stops the epmd the project brought up and no other, with stand-ins for RabbitMQ,
Redis and the package tools on PATH (nothing of the machine's is started or stopped): every RabbitMQ
command brings up an epmd if none runs, as the real CLI tools and server do."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "services.sh"

# ensure_epmd: what an Erlang node does when it starts; daemons are copies of sleep named like the real ones
STUBS: Dict[str, str] = {
    "pgrep": """want=${@: -1}; newest=; for p in $("$REAL_PGREP" -x "$want"); do
  [ "/proc/$p/exe" -ef "$DAEMONS/$want" ] 2>/dev/null || continue  # the stand-ins only; no zombie
  newest=$p; [ "$1" = -nx ] || echo "$newest"; done
[ -n "$newest" ] || exit 1; [ "$1" = -nx ] && echo "$newest"; exit 0""",
    "rabbitmq-diagnostics": 'ensure_epmd; [ -f "$STATE/rabbit" ]',
    "rabbitmq-plugins": "ensure_epmd",
    "rabbitmq-server": 'ensure_epmd; nohup "$DAEMONS/beam.smp" 300 >/dev/null 2>&1 & echo $! >"$STATE/rabbit"',
    "rabbitmqctl": """ensure_epmd; case "$2" in
  eval) cat "$STATE/rabbit" ;;
  stop) kill "$(cat "$STATE/rabbit")"; rm -f "$STATE/rabbit" ;;
esac""",
    "epmd": 'echo "epmd: up and running on port 4369 with data:"',
    "redis-cli": 'case "$*" in *ping*) echo PONG ;; esac',
    "redis-server": "exit 0",
    "tesseract": 'echo "tesseract 5.3.0"',
    "apt-get": "exit 0",
    "sudo": '[ "$1" = -n ] && shift; exec "$@"',
}
PRELUDE = """#!/usr/bin/env bash
ensure_epmd() { pgrep -x epmd >/dev/null || { nohup "$DAEMONS/epmd" 300 >/dev/null 2>&1 & }; }
"""


@pytest.fixture
def machine(tmp_path: Path):
    """A PATH of stand-ins, a state folder and the daemons started, all ended afterwards."""
    stubs, daemons, state = tmp_path / "bin", tmp_path / "daemons", tmp_path / "state"
    for d in (stubs, daemons, state):
        d.mkdir()
    for name in ("epmd", "beam.smp"):
        shutil.copy(shutil.which("sleep") or "/bin/sleep", daemons / name)
    for name, body in STUBS.items():
        (stubs / name).write_text(PRELUDE + body + "\n")
        (stubs / name).chmod(0o755)
    (state / "enabled_plugins").write_text("")  # the plugins not yet enabled: install asks RabbitMQ
    real_pgrep = shutil.which("pgrep")
    if real_pgrep is None:
        pytest.skip("no pgrep (procps) on this machine")
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "DAEMONS": str(daemons), "STATE": str(state),
           "REAL_PGREP": real_pgrep,
           "SERVICES_RUN_DIR": str(state), "SERVICES_WAIT_S": "10", "REDIS_DIR": str(state),
           "RABBITMQ_ENABLED_PLUGINS_FILE": str(state / "enabled_plugins")}
    yield env, daemons, state
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(p / "exe").startswith(str(daemons)):
                os.kill(int(p.name), 9)
        except OSError:
            pass


def _run(env: Dict[str, str], step: str) -> None:
    done = subprocess.run(["bash", str(SCRIPT), step], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _epmds(daemons: Path) -> list:
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(p / "exe") == str(daemons / "epmd") and "Z" not in (p / "stat").read_text().split()[2]:
                out.append(int(p.name))
        except OSError:
            pass
    return out


def test_stop_ends_the_epmd_that_installs_status_probe_brought_up(machine):
    env, daemons, state = machine
    _run(env, "install")  # its plugin check asks RabbitMQ whether it runs: the CLI starts an epmd
    [epmd] = _epmds(daemons)
    assert (state / "testbed-epmd.pid").read_text().strip() == str(epmd)
    _run(env, "start")
    assert _epmds(daemons) == [epmd] and (state / "testbed-rabbitmq.pid").is_file()
    _run(env, "stop")
    deadline = time.monotonic() + 5
    while _epmds(daemons) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _epmds(daemons) == [] and not (state / "testbed-epmd.pid").exists()


def test_an_epmd_that_ran_before_is_left_running(machine):
    env, daemons, state = machine
    users = subprocess.Popen([str(daemons / "epmd"), "300"])
    try:
        for step in ("install", "start", "stop"):
            _run(env, step)
        assert _epmds(daemons) == [users.pid] and not (state / "testbed-epmd.pid").exists()
    finally:
        users.kill()
        users.wait()
