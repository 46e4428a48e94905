"""CPU hogs shared by every test process of the machine: `TESTBED_CPU_HOG=N` asks for N busy processes
while a live test module runs, and with pytest-xdist two workers may run such modules at once. Each
starting its own N would keep 2N cores busy, not the N the setting names; so the hogs are the machine's:
the first module to need them starts them, the last one to leave stops them, and a hog also stops by
itself once no process that asked for it is alive (a worker killed mid-test leaves none behind)."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List

HOG_DIR = Path(tempfile.gettempdir()) / "testbed-cpu-hog"

# spins for half a second at a time, then checks that a process that asked for it is still alive
_HOG = """
import os, sys, time
users = sys.argv[1]
def alive(name):
    try:
        with open("/proc/%d/stat" % int(name.split("-")[0])) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False
while True:
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass
    if not any(alive(n) for n in os.listdir(users)):
        break
"""


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "a") as fd:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    """Running, not a zombie: a killed hog stays a zombie until the process that started it (maybe
    another worker) reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # another worker's: it reaps it
        pass


def running_hogs(root: Path = HOG_DIR) -> List[int]:
    hogs = root / "hogs"
    return [int(p.name) for p in hogs.iterdir() if _alive(int(p.name))] if hogs.is_dir() else []


def _start(root: Path, n: int) -> None:
    """N hogs running; the caller's file is in users/ already (a hog without live users stops)."""
    for user in (root / "users").iterdir():  # left by killed processes (a reused pid would keep hogs on)
        if not _alive(int(user.name.split("-")[0])):
            user.unlink()
    (root / "hogs").mkdir(exist_ok=True)
    for stale in (root / "hogs").iterdir():
        if not _alive(int(stale.name)):
            stale.unlink()
    for _ in range(n - len(running_hogs(root))):
        hog = subprocess.Popen([sys.executable, "-c", _HOG, str(root / "users")], start_new_session=True)
        (root / "hogs" / str(hog.pid)).touch()


def _stop_if_unused(root: Path) -> None:
    if any(_alive(int(name.split("-")[0])) for name in os.listdir(root / "users")):
        return
    for pid in running_hogs(root):
        os.kill(pid, signal.SIGKILL)
        _reap(pid)
        (root / "hogs" / str(pid)).unlink(missing_ok=True)


@contextmanager
def machine_hogs(n: int, root: Path = HOG_DIR) -> Iterator[List[int]]:
    """N processes keeping cores busy on the machine while this block runs, shared with every other
    process in such a block; yields their pids."""
    if n <= 0:
        yield []
        return
    me = root / "users" / f"{os.getpid()}-{uuid.uuid4().hex}"
    with _locked(root):
        me.parent.mkdir(exist_ok=True)
        me.touch()
        _start(root, n)
        pids = running_hogs(root)
    try:
        yield pids
    finally:
        with _locked(root):
            me.unlink(missing_ok=True)
            _stop_if_unused(root)
