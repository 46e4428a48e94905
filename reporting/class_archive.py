"""An archive of the classes a report's JVM loads, for the next report's JVM (dynamic class data
sharing, JDK 17): the JVM maps the archive instead of finding, reading and verifying thousands of
classes in Spark's jars, which is most of the seconds a report's JVM takes to start and plan.

The first report on a machine runs with -XX:+RecordDynamicDumpInfo and, once its Spark stage is
done, has `jcmd` write the classes loaded so far into the archive (in the background, while the
report draws its figures); later reports start with -XX:SharedArchiveFile. The archive lives in
~/.cache/testbed (XDG_CACHE_HOME), named after the Java executable and Spark's jars, so that
another JDK or Spark version makes another archive; a JVM that cannot use an archive runs without
it. Without jcmd (a JRE) or a writable cache folder, nothing is archived.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional

# unified logging of class data sharing off (it goes to stdout): an archive the JVM cannot map, or
# the classes it leaves out of one, are no news worth printing
_QUIET = ["-Xlog:cds*=off"]
DUMP_TIMEOUT_S = 300


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
        """Archive the classes the recording JVM has loaded (a temporary file, renamed when complete,
        so that a concurrent report never maps half an archive). Failures only cost the archive."""
        if not self.recording:
            return
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            subprocess.run([str(self._jcmd), str(jvm_pid), "VM.cds", "dynamic_dump", str(tmp)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=DUMP_TIMEOUT_S)
            os.replace(tmp, self.path)  # FileNotFoundError when jcmd answered but wrote nothing
        except (OSError, subprocess.SubprocessError):
            tmp.unlink(missing_ok=True)
