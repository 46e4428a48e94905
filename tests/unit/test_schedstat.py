"""Run-queue delay from the scheduler's per-task statistics (operators/schedstat.py): the file's
fields, this process's own threads, and child processes read before they are reaped."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from operators.schedstat import ChildDelays, SchedStat, parse_schedstat, read_schedstat, run_child, thread_delay_ns


def test_a_schedstat_line_is_cpu_delay_and_slices():
    assert parse_schedstat("566387403 44839833 112\n") == SchedStat(566387403, 44839833, 112)
    for bad in ("", "1 2", "1 2 3 4", "1 -2 3", "a b c"):
        with pytest.raises(ValueError):
            parse_schedstat(bad)


def test_an_unreadable_or_foreign_file_reads_as_unknown(tmp_path):
    assert read_schedstat(tmp_path / "missing") is None
    (tmp_path / "schedstat").write_text("not counters\n")
    assert read_schedstat(tmp_path / "schedstat") is None
    assert thread_delay_ns(threading.get_native_id(), proc=tmp_path) is None


def test_this_threads_delay_is_read_and_never_decreases():
    tid = threading.get_native_id()
    first = thread_delay_ns(tid)
    start = time.thread_time()
    while time.thread_time() - start < 0.02:
        pass
    assert first is not None and thread_delay_ns(tid) >= first


def test_a_child_runs_as_subprocess_run_would_and_its_delay_is_added():
    children = ChildDelays()
    code = "import sys, time\ndata = sys.stdin.buffer.read()\nt = time.process_time()\n" \
           "while time.process_time() - t < 0.05: pass\nsys.stdout.buffer.write(data[::-1])\n" \
           "sys.stderr.write('note')\nsys.exit(3)"
    done = run_child([sys.executable, "-c", code], b"x" * 200_000 + b"ab", 60.0, children=children)
    assert done.returncode == 3 and done.stdout == b"ba" + b"x" * 200_000 and done.stderr == b"note"
    assert children.known and children.total_ns() >= 0
    before = children.total_ns()
    run_child([sys.executable, "-c", "pass"], b"", 60.0, children=children)
    assert children.total_ns() >= before


def test_a_child_that_outlasts_its_timeout_is_killed_and_reaped():
    children = ChildDelays()
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_child([sys.executable, "-c", "import time; time.sleep(30)"], b"", 0.5, children=children)
    assert time.monotonic() - began < 20 and children.known


def test_one_unreadable_childs_delay_makes_the_sum_unknown():
    children = ChildDelays()
    children.add(5)
    assert children.total_ns() == 5
    children.add(None)
    assert children.total_ns() is None
