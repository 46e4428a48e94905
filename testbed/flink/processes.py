"""Flink's JVMs as child processes: started in their own session, tied to this process (Linux's
parent-death signal: if the controller dies, even by SIGKILL, its JVMs get SIGKILL), stopped by pid.
Every process started here is tracked until it has exited, so nothing is left behind."""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

PR_SET_PDEATHSIG = 1
_live: Dict[int, "FlinkProcess"] = {}
_lock = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # runs in the child before exec: SIGKILL when the thread that started it exits. That thread must
    # therefore live as long as the cluster (the controller's main thread does).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


@dataclass
class FlinkProcess:
    name: str  # jobmanager, tm-1, tm-2, ...
    popen: subprocess.Popen
    log: Path
    prom_port: int
    started: float  # time.monotonic() of the start

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_mb(self) -> Optional[float]:
        """Resident memory of the JVM (None once it has gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            return None
        return None

    def cpu_s(self) -> Optional[float]:
        """CPU time the JVM has used (user + system), None once it has gone."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _in_child(cgroup_procs: Sequence[Path]) -> Callable[[], None]:
    """What the child does before exec: die with its parent, and join its cgroups (a CPU limit), so
    that the start script and the JVM it execs are limited from their first instruction."""
    def prepare() -> None:
        _die_with_parent()
        for path in cgroup_procs:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
    return prepare


def launch(name: str, argv: Sequence[str], env: Mapping[str, str], log: Path, prom_port: int,
           cgroup_procs: Sequence[Path] = ()) -> FlinkProcess:
    """Starts a process in its own session; with cgroup_procs, in those cgroups (their cgroup.procs files)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(list(argv), env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_in_child(tuple(cgroup_procs)))
    proc = FlinkProcess(name, popen, log, prom_port, time.monotonic())
    with _lock:
        _live[proc.pid] = proc
    return proc


def stop(proc: FlinkProcess, graceful: bool, timeout_s: float) -> float:
    """SIGTERM (then SIGKILL after timeout_s) or SIGKILL at once; waits until it has exited.
    Returns the seconds it took."""
    t0 = time.monotonic()
    _signal(proc, signal.SIGTERM if graceful else signal.SIGKILL)
    try:
        proc.popen.wait(timeout_s if graceful else 30.0)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.popen.wait(30.0)
    _signal(proc, signal.SIGKILL)  # anything else left in its session (none expected)
    with _lock:
        _live.pop(proc.pid, None)
    return time.monotonic() - t0


def _signal(proc: FlinkProcess, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # its own session: the pid is the group id
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(procs: List[FlinkProcess], timeout_s: float) -> None:
    """SIGTERM every process at once, wait, SIGKILL the rest."""
    for p in procs:
        _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        stop(p, graceful=False, timeout_s=0)


def live_pids() -> List[int]:
    with _lock:
        return [pid for pid, p in _live.items() if p.alive()]


@atexit.register
def _stop_leftovers() -> None:
    with _lock:
        procs = list(_live.values())
    if procs:
        stop_all(procs, timeout_s=10.0)
