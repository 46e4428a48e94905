"""Which process owns a live run's containers: a label naming this machine, the pid and the process's
start time, so that a reused pid is not taken for the killed run's process."""
from __future__ import annotations

import subprocess
import sys

from testbed.live import engines
from testbed.live.engines import owner, owner_gone


def test_a_running_process_owns_its_containers_and_an_exited_one_does_not():
    assert not owner_gone(owner())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    label = owner(child.pid)
    try:
        assert not owner_gone(label)
    finally:
        child.kill()
        child.wait()
    assert owner_gone(label)


def test_a_reused_pid_with_another_start_time_is_not_the_owner():
    machine, pid, ticks = owner().rsplit("/", 2)
    assert owner_gone(f"{machine}/{pid}/{int(ticks) + 1}")


def test_an_owner_on_another_machine_or_an_unknown_label_is_left_alone(monkeypatch):
    assert not owner_gone("another-machine/1/1")
    assert not owner_gone("not a label this code wrote")
    assert not owner_gone("")
    monkeypatch.setattr(engines, "_machine", lambda: "machine-b")
    assert owner(1).startswith("machine-b/1/")
