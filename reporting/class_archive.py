"""An archive of the classes a report's JVM loads, for the next report's JVM (dynamic class data
sharing, JDK 17): the JVM maps the archive instead of finding, reading and verifying thousands of
classes in Spark's jars, which is most of the seconds a report's JVM takes to start and plan.

The first report on a machine runs with -XX:+RecordDynamicDumpInfo and, once its Spark stage is
done, has `jcmd` write the classes loaded so far into the archive (in the background, while the
report draws its figures); later reports start with -XX:SharedArchiveFile. The archive lives in
~/.cache/testbed (XDG_CACHE_HOME), named after the Java executable and Spark's jars, so that
another JDK or Spark version makes another archive; a JVM that cannot use an archive runs without
it. Without jcmd (a JRE) or a writable cache folder, nothing is archived.

The JVM writes the archive into a private scratch folder beside it, renamed into place when
complete; the folder is removed on every exit path (a failure, a timeout, `cancel()` when the
report is interrupted), so that an interrupted report never leaves ~130 MB behind. Once the folder
is gone the JVM cannot create the file any more (an open file's space is freed when it closes).
Scratch folders a killed report left (SIGKILL gives no chance to clean up) are removed by the next.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

# unified logging of class data sharing off (it goes to stdout): an archive the JVM cannot map, or
# the classes it leaves out of one, are no news worth printing
_QUIET = ["-Xlog:cds*=off"]
DUMP_TIMEOUT_S = 300
SCRATCH_PREFIX = ".spark-classes-"
SCRATCH_SUFFIX = ".tmp"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "testbed"


def _java_bin(tool: str) -> Optional[Path]:
    """The JDK tool next to the java Spark starts (JAVA_HOME's, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    path = Path(java).resolve().with_name(tool)
    return path if path.exists() else None


def _spark_jars() -> List[Path]:
    from pyspark.find_spark_home import _find_spark_home

    return sorted((Path(_find_spark_home()) / "jars").glob("*.jar"))


class ClassArchive:
    def __init__(self, folder: Optional[Path] = None):
        java, self._jcmd = _java_bin("java"), _java_bin("jcmd")
        key = hashlib.sha256("\n".join([str(java), *(f"{j.name} {j.stat().st_size}" for j in _spark_jars())]).encode())
        self.path = (folder or _cache_dir()) / f"spark-classes-{key.hexdigest()[:16]}.jsa"
        self.recording = not self.path.is_file() and self._jcmd is not None and self._writable()
        self._lock = threading.Lock()  # guards the dump's process and scratch folder against cancel()
        self._cancelled = False
        self._proc: Optional[subprocess.Popen] = None
        self._scratch: Optional[Path] = None
        if self.recording:
            remove_stale_scratch(self.path.parent)

    def _writable(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.access(self.path.parent, os.W_OK)
        except OSError:
            return False

    def java_options(self) -> List[str]:
        if self.path.is_file():
            return [f"-XX:SharedArchiveFile={self.path}", *_QUIET]
        return ["-XX:+RecordDynamicDumpInfo", *_QUIET] if self.recording else []

    def dump(self, jvm_pid: int) -> None:
        """Archive the classes the recording JVM has loaded (into a scratch folder, the file renamed
        into place when complete, so that a concurrent report never maps half an archive). Failures
        only cost the archive; nothing of the attempt stays behind."""
        if not self.recording:
            return
        with self._scratch_folder() as scratch:
            if scratch is None:  # cancelled before it started
                return
            tmp = scratch / self.path.name
            if self._run_jcmd([str(self._jcmd), str(jvm_pid), "VM.cds", "dynamic_dump", str(tmp)]):
                try:
                    os.replace(tmp, self.path)  # FileNotFoundError when jcmd answered but wrote nothing
                except OSError:
                    pass

    def cancel(self) -> None:
        """Stop a dump in progress and remove what it wrote (the report was interrupted)."""
        with self._lock:
            self._cancelled = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)

    @contextmanager
    def _scratch_folder(self) -> Iterator[Optional[Path]]:
        """A private folder for the dump, removed on every way out (None once cancelled)."""
        with self._lock:
            if self._cancelled:
                folder = None
            else:
                folder = self._scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, suffix=SCRATCH_SUFFIX,
                                                               dir=self.path.parent))
        try:
            yield folder
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def _run_jcmd(self, command: List[str]) -> bool:
        """Run jcmd (killed on a timeout, an interrupt or cancel()); True if it succeeded."""
        with self._lock:
            if self._cancelled:
                return False
            try:
                self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                return False
        proc = self._proc
        try:
            return proc.wait(timeout=DUMP_TIMEOUT_S) == 0 and not self._cancelled
        except subprocess.TimeoutExpired:
            return False
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def remove_stale_scratch(folder: Path, older_than_s: float = 2 * DUMP_TIMEOUT_S) -> None:
    """Remove scratch folders of dumps that cannot be running any more (a killed report's)."""
    now = time.time()
    # the folders, and the files earlier versions wrote beside the archive (<name>.jsa.<pid>.tmp)
    for path in [*folder.glob(f"{SCRATCH_PREFIX}*{SCRATCH_SUFFIX}"), *folder.glob("spark-classes-*.jsa.*.tmp")]:
        try:
            if now - path.lstat().st_mtime > older_than_s:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
        except OSError:
            pass
