"""The CPU work a word costs in the job (WordWork.java): rounds of a deterministic computation. The
rounds that make `work_us` of CPU time on this machine are measured once per cluster, before the job
starts, by the job jar's own calibration (a separate JVM, timed in thread CPU time so that a loaded
machine does not inflate it), and every TaskManager of the cluster then does the same rounds per word.
The measurement and the rounds go into the run's record."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Optional

from testbed.flink.settings import FlinkSettings, FlinkSettingsError

WORK_CLASS = "testbed.flink.wordcount.WordWork"


@dataclass(frozen=True)
class WorkCalibration:
    """CPU time per round of the job's computation, measured here (median, lowest, highest of the trials)."""

    ns_per_round: float
    min_ns: float
    max_ns: float


@dataclass(frozen=True)
class WordCost:
    """What a word costs the counting operator: the rounds the job does and, if measured, their CPU time."""

    rounds: int
    work_us: float  # the target (work_rounds given: the rounds at the measured speed, NaN unmeasured)
    calibration: Optional[WorkCalibration] = None

    def as_dict(self) -> Dict[str, object]:
        return {"rounds": self.rounds, "work_us": self.work_us,
                "calibration": asdict(self.calibration) if self.calibration else None}


def parse_calibration(text: str) -> WorkCalibration:
    """The calibration's line `ns_per_round=X min=Y max=Z ...`; ValueError if it is not there."""
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "ns_per_round" in fields:
            calibration = WorkCalibration(float(fields["ns_per_round"]), float(fields["min"]), float(fields["max"]))
            if not calibration.ns_per_round > 0:
                raise ValueError(f"a round cannot take {calibration.ns_per_round} ns")
            return calibration
    raise ValueError(f"no calibration in the output: {text[-300:]!r}")


def rounds_for(work_us: float, ns_per_round: float) -> int:
    """The rounds that take work_us of CPU time (at least one)."""
    return max(1, round(work_us * 1000.0 / ns_per_round))


def java_binary() -> str:
    """The `java` the Flink scripts use: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def calibrate(job_jar: Path, timeout_s: float) -> WorkCalibration:
    """Runs the job jar's calibration (about 0.5 s of CPU after the JVM's start)."""
    argv = [java_binary(), "-cp", str(job_jar), WORK_CLASS]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FlinkSettingsError("work_us", f"the work calibration did not run: {e}") from None
    if done.returncode != 0:
        raise FlinkSettingsError("work_us", f"the work calibration failed (status {done.returncode}): "
                                 f"{done.stderr.strip()[-300:]}")
    return parse_calibration(done.stdout)


def word_cost(s: FlinkSettings) -> WordCost:
    """The rounds per word of a cluster with these settings: calibrated from work_us when the rounds
    are not given (work_us 0 and no rounds: no work)."""
    if s.work_rounds > 0:
        return WordCost(s.work_rounds, s.work_us if s.work_us > 0 else float("nan"))
    if s.work_us <= 0:
        return WordCost(0, 0.0)
    calibration = calibrate(Path(s.job_jar), s.start_timeout_s)
    return WordCost(rounds_for(s.work_us, calibration.ns_per_round), s.work_us, calibration)
