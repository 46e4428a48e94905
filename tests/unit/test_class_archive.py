"""The report's class archive leaves nothing behind but a complete archive: a failed, cancelled or
interrupted dump removes what it wrote. A fake jcmd stands in for the JDK's (no JVM starts)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest

from reporting import class_archive, spark_session
from reporting.class_archive import SCRATCH_PREFIX, ClassArchive
from reporting.report_config import SparkConfig

ROOT = Path(__file__).resolve().parents[2]
# jcmd PID VM.cds dynamic_dump FILE: writes part of the archive, then either finishes (FAKE_SLEEP=0)
# or becomes a long sleep (exec: a kill of the process ends it, no orphan keeps running)
FAKE_JCMD = """#!/bin/sh
echo partial > "$4"
if [ "${FAKE_SLEEP:-0}" != 0 ]; then exec sleep "$FAKE_SLEEP"; fi
echo complete >> "$4"
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def fake_jcmd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    jcmd = tmp_path / "bin" / "jcmd"
    jcmd.parent.mkdir()
    jcmd.write_text(FAKE_JCMD)
    jcmd.chmod(0o755)
    monkeypatch.setattr(class_archive, "_java_bin", lambda tool: jcmd if tool == "jcmd" else Path("/bin/true"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return jcmd


def cache_files(tmp_path: Path) -> List[str]:
    return sorted(str(p.relative_to(tmp_path / "cache")) for p in (tmp_path / "cache").rglob("*"))


def wait_for_partial(tmp_path: Path) -> None:
    deadline = time.monotonic() + 30
    while not list((tmp_path / "cache").glob(f"testbed/{SCRATCH_PREFIX}*/*.jsa")):
        assert time.monotonic() < deadline, "the fake jcmd never started"
        time.sleep(0.02)


def test_a_complete_dump_is_renamed_into_place(fake_jcmd: Path, tmp_path: Path) -> None:
    archive = ClassArchive()
    assert archive.recording
    archive.dump(1)
    assert archive.path.read_text() == "partial\ncomplete\n"
    assert cache_files(tmp_path) == ["testbed", f"testbed/{archive.path.name}"]


def test_a_failed_dump_leaves_nothing(fake_jcmd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_RC", "1")
    ClassArchive().dump(1)
    assert cache_files(tmp_path) == ["testbed"]


def test_a_cancelled_dump_stops_and_leaves_nothing(fake_jcmd: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SLEEP", "60")
    archive = ClassArchive()
    dumping = threading.Thread(target=archive.dump, args=(1,))
    dumping.start()
    wait_for_partial(tmp_path)
    archive.cancel()
    dumping.join(timeout=10)
    assert not dumping.is_alive()
    assert cache_files(tmp_path) == ["testbed"]
    archive.dump(1)  # once cancelled, never again
    assert cache_files(tmp_path) == ["testbed"]


def test_an_aborted_session_cancels_its_dump(fake_jcmd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What an interrupted report does (run_report: SessionStart.abort on any exception)."""
    monkeypatch.setenv("FAKE_SLEEP", "60")
    stopped = threading.Event()
    jvm = SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(ProcessHandle=SimpleNamespace(
        current=lambda: SimpleNamespace(pid=lambda: 1)))))
    spark = SimpleNamespace(_jvm=jvm, stop=stopped.set)
    monkeypatch.setattr(spark_session, "build_session", lambda cfg, archive, input_bytes: spark)
    start = spark_session.SessionStart(SparkConfig())
    assert start.session() is spark
    start.stop()  # archives in the background, as after the report's Spark stage
    wait_for_partial(tmp_path)
    start.abort()
    start.join()
    assert stopped.is_set() and cache_files(tmp_path) == ["testbed"]


@pytest.mark.slow
def test_sigterm_during_a_dump_leaves_nothing(fake_jcmd: Path, tmp_path: Path) -> None:
    """The report's SIGTERM handler turns the signal into KeyboardInterrupt; the dump's clean-up runs."""
    script = f"""
import sys
from pathlib import Path
from reporting import class_archive
from reporting.report import _interrupt
import signal
signal.signal(signal.SIGTERM, _interrupt)
class_archive._java_bin = lambda tool: Path({str(fake_jcmd)!r}) if tool == "jcmd" else Path("/bin/true")
try:
    class_archive.ClassArchive().dump(1)
except KeyboardInterrupt:
    sys.exit(130)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_SLEEP": "60", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        wait_for_partial(tmp_path)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
    assert cache_files(tmp_path) == ["testbed"]


def test_stale_scratch_of_a_killed_report_is_removed(fake_jcmd: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "testbed"
    old, fresh = folder / f"{SCRATCH_PREFIX}old.tmp", folder / f"{SCRATCH_PREFIX}fresh.tmp"
    legacy = folder / "spark-classes-0123.jsa.42.tmp"  # what earlier versions left beside the archive
    for path in (old, fresh):
        path.mkdir(parents=True)
        (path / "x.jsa").write_text("partial")
    legacy.write_text("partial")
    for path in (old, legacy):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    ClassArchive()
    assert not old.exists() and not legacy.exists()
    assert fresh.exists()  # another report may be dumping into it
