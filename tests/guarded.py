"""A subprocess run to its end unless it hangs, judged by the CPU it gets rather than by the wall clock.

A wall-clock timeout holds only on an idle machine: at a load of 15 on two cores a child gets a tenth of
a core, and a run that needs 80 s of CPU takes 15 minutes. What a hang looks like does not depend on the
load: a busy loop spends far more CPU than the work needs, and a blocked child spends none at all for a
long time. So the child (with its descendants) is stopped when it has used more than `cpu_s` seconds of
CPU, or has used no CPU for `stall_s` seconds of wall time."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Sequence, Union

TICKS = os.sysconf("SC_CLK_TCK")


class Hung(AssertionError):
    """The child spent more CPU than its work needs, or none for too long."""


def _stat(pid: int) -> List[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()  # the fields after the command name, from the state on


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and every descendant still running (or reaped by them)."""
    children: Dict[int, List[int]] = {}
    ticks: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(int(entry))
        except (OSError, ValueError):
            continue  # exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    tree, frontier = {root}, [root]
    while frontier:
        below = [c for c in children.get(frontier.pop(), []) if c not in tree]
        tree.update(below)
        frontier.extend(below)
    return sum(ticks.get(pid, 0) for pid in tree) / TICKS


def run(cmd: Sequence[Union[str, Path]], *, cpu_s: float, stall_s: float = 300.0,
        **popen: object) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True, ...)`, guarded against hangs (above)."""
    popen.setdefault("start_new_session", True)  # its own process group: a hang is stopped whole
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)  # type: ignore[call-overload]
    used, progressed_at = 0.0, time.monotonic()
    while True:
        try:
            out, err = proc.communicate(timeout=1.0)  # a retry after a timeout loses no output
            return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            pass
        now_used = _tree_cpu_s(proc.pid)
        if now_used > used:
            used, progressed_at = now_used, time.monotonic()
        hung = (f"used {used:.0f} s of CPU, more than the {cpu_s:.0f} s its work needs" if used > cpu_s else
                f"used no CPU for {stall_s:.0f} s" if time.monotonic() - progressed_at > stall_s else None)
        if hung:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise Hung(f"{' '.join(map(str, cmd))}: {hung}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
