"""The machine's CPU hogs (tests/cpu_hog.py): shared by test processes, stopped by the last one, and
gone by themselves when the processes that asked for them were killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cpu_hog import _alive, machine_hogs, running_hogs

pytestmark = pytest.mark.slow  # starts processes


def wait_for(condition, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def exists(pid: int) -> bool:
    """Running (a killed child not yet reaped is a zombie: it runs nothing)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return _alive(pid)


def test_two_users_share_the_hogs_and_the_last_one_stops_them(tmp_path: Path):
    with machine_hogs(2, tmp_path) as first:
        assert len(first) == 2
        with machine_hogs(2, tmp_path) as second:
            assert sorted(second) == sorted(first)  # no new hogs: two users, still two busy cores
        assert sorted(running_hogs(tmp_path)) == sorted(first)  # one user left: they keep running
    assert running_hogs(tmp_path) == []
    assert wait_for(lambda: not any(exists(pid) for pid in first))


def test_hogs_of_a_killed_user_stop_by_themselves(tmp_path: Path):
    user = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from pathlib import Path\n"
        "from tests.cpu_hog import machine_hogs\n"
        f"with machine_hogs(1, Path({str(tmp_path)!r})) as pids:\n"
        "    print(pids[0], flush=True)\n"
        "    time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        hog = int(user.stdout.readline())
        assert exists(hog)
    finally:
        user.send_signal(signal.SIGKILL)  # as a test worker killed mid-test: it never stops its hogs
        user.wait()
    assert wait_for(lambda: not exists(hog))
    with machine_hogs(1, tmp_path) as pids:  # the next user starts a fresh one
        assert pids and pids[0] != hog


def test_no_hog_is_asked_for(tmp_path: Path):
    with machine_hogs(0, tmp_path) as pids:
        assert pids == []
    assert not (tmp_path / "hogs").exists()
