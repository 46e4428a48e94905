"""infra/detach.sh: a daemon started by `detached` from a shell that holds a lock does not keep the
lock, whether the shell calls it in the foreground or as a background job (as infra/docker.sh starts
dockerd), and the calling shell keeps its own descriptors."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

DETACH = Path(__file__).resolve().parents[2] / "infra" / "detach.sh"


def _start_under_lock(lock: Path, start: str) -> int:
    """Runs `start` (which must print the daemon's pid) in a bash under `flock lock`; the pid."""
    script = f'. "{DETACH}"\n{start}\n'
    done = subprocess.run(["flock", str(lock), "bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def _lock_free(lock: Path) -> bool:
    return subprocess.run(["flock", "-n", str(lock), "true"], timeout=30).returncode == 0


def _lock_freed(lock: Path, within_s: float = 30.0) -> bool:
    """Whether the lock comes free while the daemon still runs: a background job's shell closes the
    descriptors it inherited when it is first scheduled, which on a loaded machine can come after its
    parent has exited (a daemon that kept the lock keeps it for its 60 s)."""
    deadline = time.monotonic() + within_s
    while not _lock_free(lock):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("start", [
    "detached sleep 60 >/dev/null 2>&1 &\necho $!",  # a background job: its own shell must not stay behind
    "detached nohup sleep 60 >/dev/null 2>&1 &\necho $!",  # as docker.sh starts dockerd
])
def test_a_detached_daemon_does_not_hold_its_callers_lock(tmp_path: Path, start: str) -> None:
    lock = tmp_path / "lock"
    pid = _start_under_lock(lock, start)
    try:
        assert Path(f"/proc/{pid}").exists(), "the daemon should still run"
        assert _lock_freed(lock), "the daemon (or a shell waiting for it) kept the caller's lock"
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_calling_shell_keeps_its_descriptors(tmp_path: Path) -> None:
    """In the foreground `detached` closes the descriptors in a subshell only: fd 3 stays the caller's."""
    script = f'. "{DETACH}"\nexec 3>"{tmp_path / "f"}"\ndetached true\necho kept >&3\n'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "f").read_text() == "kept\n"
