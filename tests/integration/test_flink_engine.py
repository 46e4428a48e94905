"""A real Apache Flink in reactive mode (testbed/flink, docs/flink.md): the project's script installs
Flink and builds the WordCount job; a cluster runs it at a modest rate while it is scaled 1 -> 2 -> 1
TaskManagers (the second one killed); every record the schedule generated must end counted once in
the keyed state, and no Flink process may outlive a test or an interrupted controller.

Part of `make test` (the fixture installs Flink and builds the job on first use: about 330 MB from
PyPI). `make flink-test` runs this file alone under `flock /tmp/testbed-flink.lock`, so that one
Flink cluster runs at a time on the machine (a measurement takes the same lock)."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from testbed.flink.cluster import FlinkCluster, FlinkClusterError
from testbed.flink.metrics import JobReading
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FlinkSettings

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration, pytest.mark.live, pytest.mark.slow, pytest.mark.usefixtures("cpu_hog"),
]

RATE = 150.0  # sentences/s (8 words each): a small share of one TaskManager's capacity
SETTINGS = FlinkSettings(checkpoint_s=2.0, stabilization_s=1.0, cooldown_s=1.0, heartbeat_interval_s=1.0,
                         heartbeat_timeout_s=5.0, restart_delay_s=0.5, stop_mode="kill")


@pytest.fixture(scope="module")
def flink_installed() -> FlinkSettings:
    """Flink installed and the job built by the project's script (idempotent)."""
    done = subprocess.run(["bash", str(ROOT / "infra" / "flink.sh"), "build"], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    return SETTINGS


def flink_alive(pids: List[int]) -> List[int]:
    """Those of `pids` that are still a running Java process (a reused pid is not ours)."""
    alive = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (b"java" in cmd or b"flink" in cmd):
            alive.append(pid)
    return alive


def wait_gone(pids: List[int], timeout_s: float) -> List[int]:
    deadline = time.monotonic() + timeout_s
    while flink_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return flink_alive(pids)


class Recorder:
    """Reads the cluster every `every_s` and keeps what the checks need."""

    def __init__(self, cluster: FlinkCluster):
        self.cluster = cluster
        self.readings: List[JobReading] = []

    def read(self) -> JobReading:
        r = self.cluster.read()
        self.readings.append(r)
        return r

    def until(self, ok, what: str, timeout_s: float) -> JobReading:
        return self.cluster.wait_until(ok, what, timeout_s=timeout_s, read=self.read, every_s=0.25)

    def parallelisms(self) -> List[int]:
        """The parallelism of the counting vertex over time, repeats and restarts (0) left out."""
        seen: List[int] = []
        for r in self.readings:
            if r.parallelism and (not seen or seen[-1] != r.parallelism):
                seen.append(r.parallelism)
        return seen

    def processed(self) -> float:
        """Words the counting operator processed over all its task attempts (as last read), replays
        included: an attempt that a restart ended may have processed more after its last reading."""
        last: dict = {}
        for r in self.readings:
            last.update(r.attempts())
        return sum(last.values())


def test_wordcount_rescales_1_2_1_and_counts_every_record_once(flink_installed, tmp_path):
    s = flink_installed
    run_s = 75.0
    schedule = RateSchedule.of([(0, RATE), (run_s, 0)])  # then nothing: the backlog drains, totals settle
    t0 = time.monotonic()
    with FlinkCluster(s, schedule, tmp_path / "flink") as cluster:
        rec = Recorder(cluster)
        cluster.start()
        cluster.add_taskmanager()
        rec.until(lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1", s.start_timeout_s)
        rec.until(lambda r: r.source is not None and r.source.emitted >= 5 * RATE, "5 s of records", s.start_timeout_s)
        cluster.add_taskmanager()
        rec.until(lambda r: r.parallelism == 2 and r.subtask_count() == 2, "parallelism 2", s.start_timeout_s)
        last = rec.readings[-1].source
        target = (last.emitted if last else 0.0) + 5 * RATE
        rec.until(lambda r: r.source is not None and r.source.emitted >= target, "5 s more at 2", s.start_timeout_s)
        pids_before = cluster.pids()
        cluster.stop_taskmanager("tm-2", mode="kill")
        rec.until(lambda r: r.parallelism == 1 and r.subtask_count() == 1, "parallelism 1 again",
                  s.start_timeout_s + s.heartbeat_timeout_s)
        total = schedule.total()
        # the schedule ran for run_s at a rate one TaskManager carries: its end plus one more restart's allowance
        drain_s = max(0.0, run_s - cluster.now()) + run_s + s.start_timeout_s
        final = rec.until(lambda r: r.source is not None and r.source.emitted == total and r.source.pending == 0
                          and r.subtask_count() == 1 and r.counted() == s.words_per_sentence * total,
                          "every record counted", drain_s)
        pids = cluster.pids()
    wall = time.monotonic() - t0
    assert rec.parallelisms()[:3] == [1, 2, 1], rec.parallelisms()
    assert final.counted() == s.words_per_sentence * total  # not more: replays are not counted twice
    assert final.source.scheduled == total
    assert not wait_gone(pids_before + pids, 5.0), "Flink processes left after the cluster closed"
    # the metric is read, but it is no exact count: an attempt that a restart ended processed records
    # after its last reading, and those before the restored checkpoint are not replayed (on a loaded
    # machine the readings are sparser and it falls short of the count)
    processed = rec.processed()
    assert processed > 0
    print(f"\n{total} sentences, {final.counted():.0f} words counted, {processed:.0f} processed as read "
          f"({final.source.replayed:.0f} sentences replayed by the source); "
          f"parallelism {rec.parallelisms()}; {wall:.0f} s")


def test_an_application_flink_rejects_fails_at_once_naming_the_cause_and_leaves_no_process(flink_installed, tmp_path):
    """The job's main method throws (a vocabulary past Java's int): the JobManager keeps running with the
    application FAILED, and the wait for the job says so at once instead of waiting out the start
    timeout. No TaskManager is needed to find it."""
    s = dataclasses.replace(flink_installed, vocabulary=3_000_000_000)
    t0 = time.monotonic()
    with FlinkCluster(s, RateSchedule.of([(0, RATE), (10, 0)]), tmp_path / "flink") as cluster:
        cluster.start()
        up = time.monotonic() - t0
        with pytest.raises(FlinkClusterError) as err:
            cluster.wait_until(lambda r: r.parallelism == 1, "parallelism 1")
        pids = cluster.pids()
    found = time.monotonic() - t0 - up
    message = str(err.value)
    assert "the application is FAILED" in message and "3000000000" in message, message
    assert "\n" not in message.split("; see ")[0]  # the cause in one line
    assert found < s.start_timeout_s / 3, f"found after {found:.0f} s"
    assert not wait_gone(pids, 5.0), "Flink processes left after the cluster closed"
    print(f"\nREST up after {up:.1f} s, the failure found {found:.1f} s later: {message}")


def controller(tmp_path: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "testbed.flink", "run", "--rate", "50", "--seconds", "600",
            "--work-dir", str(tmp_path / "flink"), *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def started_pids(proc: subprocess.Popen) -> List[int]:
    for line in proc.stdout:
        event = json.loads(line)
        if event["event"] == "started":
            return event["pids"]
    raise AssertionError(f"the controller ended before starting Flink: {proc.stderr.read()[-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_an_interrupted_controller_leaves_no_flink_process(flink_installed, tmp_path, sig):
    proc = controller(tmp_path, "--no-wait", "--set", f"stop_timeout_s={flink_installed.stop_timeout_s}")
    try:
        pids = started_pids(proc)
        assert len(flink_alive(pids)) == 2, "the JobManager and a TaskManager run"
        time.sleep(3.0)  # mid-start: the JVMs are loading
        proc.send_signal(sig)
        proc.wait(flink_installed.stop_timeout_s + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # SIGINT: the controller stops them itself; SIGKILL: Linux's parent-death signal kills them
    assert not wait_gone(pids, 10.0), f"Flink processes left after {sig.name}"
    if sig == signal.SIGINT:
        assert proc.returncode == 130, proc.stderr.read()[-2000:]
