"""Run-queue delay: the time a task was runnable but waited for a CPU, from the scheduler's
per-task statistics (``/proc/<pid>/task/<tid>/schedstat``: CPU ns, run-queue wait ns, time slices).

Busy wall time less this delay is the time an item occupies a worker slot on a machine with a CPU to
spare: its CPU time plus its waits for Redis, the broker or the disk, without the wait for a CPU that
a crowded machine adds. It is read per task, from inside the instance, because that is where the
tasks doing an item's work are known: the worker thread (its delay read at the start and end of each
busy period, so only delay inside busy periods counts) and the processes it runs (O1's tesseract),
whose statistics are read after they exit and before they are reaped (``run_child``): once reaped,
a process's delay is gone, and from outside the container a short child is missed between polls.
``/proc/<pid>/schedstat`` alone would not do: it is the process's main thread's, not its workers'.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

PROC = Path("/proc")


class SchedStat(NamedTuple):
    cpu_ns: int  # time on a CPU
    delay_ns: int  # time runnable, waiting for a CPU
    slices: int  # times it was given a CPU


def parse_schedstat(text: str) -> SchedStat:
    """A schedstat file's three fields; ValueError on anything else."""
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise ValueError(f"a schedstat line has three counters, got {text.strip()!r}")
    return SchedStat(*(int(f) for f in fields))


def read_schedstat(path: Path) -> Optional[SchedStat]:
    """The file's counters, None where it cannot be read or parsed (no /proc, another kernel)."""
    try:
        return parse_schedstat(path.read_text())
    except (OSError, ValueError):
        return None


def thread_delay_ns(tid: int, proc: Path = PROC) -> Optional[int]:
    """The run-queue delay so far of thread ``tid`` of this process, None where unreadable."""
    stat = read_schedstat(proc / "self" / "task" / str(tid) / "schedstat")
    return None if stat is None else stat.delay_ns


class ChildDelays:
    """The run-queue delay of the child processes reaped so far (run by ``run_child``), in ns, for
    the whole process as ``os.times()`` counts their CPU; ``known`` turns False once a child's could
    not be read (no /proc): a sum missing some is not reported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total_ns = 0
        self.known = True

    def add(self, delay_ns: Optional[int]) -> None:
        with self._lock:
            if delay_ns is None:
                self.known = False
            else:
                self._total_ns += delay_ns

    def total_ns(self) -> Optional[int]:
        with self._lock:
            return self._total_ns if self.known else None


CHILDREN = ChildDelays()


def run_child(args: Sequence[str], stdin: bytes, timeout_s: float, env: Optional[Mapping[str, str]] = None,
              children: ChildDelays = CHILDREN) -> subprocess.CompletedProcess:
    """Run ``args`` with ``stdin`` as its input and its output captured, as ``subprocess.run`` would,
    adding its run-queue delay to ``children``: it is read when the child has exited but is not yet
    reaped (``waitid`` with ``WNOWAIT``), the last moment its statistics exist. Its output goes to
    anonymous files, so it never blocks on a full pipe while the input is written; a child still
    running after ``timeout_s`` is killed (``subprocess.TimeoutExpired``). Only the child's main
    thread's delay is read (a reaped child's other threads are gone): for single-threaded children."""
    expired = threading.Event()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(args), stdin=subprocess.PIPE, stdout=out, stderr=err,
                                env=None if env is None else dict(env))

        def kill() -> None:
            expired.set()
            proc.kill()  # the pid stays this child's until it is reaped below

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _feed(proc, stdin)
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            stat = read_schedstat(PROC / str(proc.pid) / "schedstat")
            children.add(None if stat is None else stat.delay_ns)
        finally:
            timer.cancel()
            proc.wait()
        if expired.is_set():
            raise subprocess.TimeoutExpired(list(args), timeout_s)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(list(args), proc.returncode, out.read(), err.read())


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    """Write the child's whole input and close it; a child that exits without reading it all is no error
    here (its exit status says what happened)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
    except BrokenPipeError:
        pass
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
