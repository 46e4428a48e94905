"""The hang guard of the tests' subprocesses: a finished child's output and status come back whole; a
busy loop (the child's or a grandchild's) is stopped once past its CPU budget, a blocked child once it
has used no CPU for the stall time, and the whole process group goes with it."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests import guarded


def test_a_finished_child_returns_its_output_and_status():
    done = guarded.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                       cpu_s=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_busy_grandchild_is_stopped_past_the_cpu_budget_with_its_group(tmp_path):
    pid_file = tmp_path / "pid"
    busy = (f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid())); print('started', flush=True)\n"
            "while True: pass")
    with pytest.raises(guarded.Hung, match="more than the 1 s its work needs") as hung:
        guarded.run(["bash", "-c", f"{sys.executable} -c \"$BUSY\"; echo never"], cpu_s=1.0,
                    env={**os.environ, "BUSY": busy})
    assert "started" in str(hung.value)  # the output so far comes with the verdict
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # SIGKILL is delivered at once; the kernel may take a moment to reap
        if _gone(grandchild):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the busy grandchild {grandchild} survived")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_blocked_child_is_stopped_after_the_stall_time():
    t0 = time.monotonic()
    with pytest.raises(guarded.Hung, match="used no CPU for 2 s"):
        guarded.run([sys.executable, "-c", "import time; time.sleep(600)"], cpu_s=60, stall_s=2)
    assert time.monotonic() - t0 < 300  # stopped long before its sleep ends, however loaded the machine
