"""Settings of a Flink cluster for the job mode (docs/flink.md#settings): memory, checkpoints, the
reactive scheduler's timing, heartbeats, how a TaskManager is stopped, which job it runs and the
jobs' parameters. `from_mapping` refuses unknown keys and `validate` names the key of a bad value."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from testbed.flink.jobs import JOBS, JobSpec, units_per_record

ROOT = Path(__file__).resolve().parents[2]
FLINK_VERSION = "2.3.0"
DEFAULT_HOME = ROOT / ".flink" / f"pypi-{FLINK_VERSION}" / "pyflink"  # infra/flink.sh install
DEFAULT_JAR = ROOT / ".flink" / "build" / "testbed-wordcount.jar"  # infra/flink.sh build: every job
STOP_MODES = ("graceful", "kill")  # SIGTERM (the TaskManager deregisters) or SIGKILL (found by heartbeat)
# what gives a TaskManager its capacity: a wait per word (whatever the machine's cores), or CPU work
# per word under a CPU limit per TaskManager, as a pod's (docs/flink.md#cpu-mode)
MODES = ("wait", "cpu")
MIN_CPU_LIMIT = 0.01  # cores: a quota of 1 ms per 100 ms period, the kernel's least
# what the controllers read as a worker's CPU utilisation: the counting task's busy time (Flink's
# busyTimeMsPerSecond, what Flink's own autoscaler reads), or the TaskManager's cgroup CPU time over
# its limit (what a pod's CPU utilisation is to Kubernetes' metrics, the cpu mode's only)
CPU_READINGS = ("busy", "cgroup")
# reactive: every vertex runs at the number of slots (TaskManagers); adaptive: each vertex at the
# parallelism its resource requirements allow (set per vertex through the REST API), in the slots there are
SCHEDULERS = ("reactive", "adaptive")


class FlinkSettingsError(ValueError):
    """A setting the cluster cannot run with; the message starts with the key."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"flink.{key}: {problem}")
        self.key = key


@dataclass(frozen=True)
class FlinkSettings:
    flink_home: Path = DEFAULT_HOME
    job_jar: Path = DEFAULT_JAR
    jm_memory_mb: int = 640  # jobmanager.memory.process.size
    tm_memory_mb: int = 768  # taskmanager.memory.process.size (one slot per TaskManager)
    checkpoint_s: float = 2.0  # execution.checkpointing.interval (local filesystem)
    # reactive scheduler: how long to wait for more TaskManagers before (re)starting the job, at
    # submission and while running; and the least time between two rescales
    stabilization_s: float = 10.0
    cooldown_s: float = 30.0
    rescale_max_delay_s: Optional[float] = None  # rescale-trigger.max-delay (None: Flink's default)
    heartbeat_interval_s: float = 3.0
    heartbeat_timeout_s: float = 15.0  # a killed TaskManager is declared lost after this
    restart_delay_s: float = 1.0  # fixed-delay restart strategy after a failure
    buffer_timeout_ms: float = 100.0  # a network buffer is sent at the latest after this (Flink's default)
    stop_mode: str = "graceful"  # how stop_taskmanager ends a TaskManager: graceful | kill
    scheduler: str = "reactive"  # reactive | adaptive (per-vertex parallelism by resource requirements)
    start_timeout_s: float = 180.0  # a process must answer (REST up, TaskManager registered) within this
    stop_timeout_s: float = 30.0  # a graceful stop waits this long before SIGKILL
    job: str = "wordcount"  # which job the cluster runs (testbed/flink/jobs.py): wordcount, ysb, traffic
    # the WordCount job (WordCountJob.java)
    words_per_sentence: int = 8
    vocabulary: int = 10000
    zipf: float = 1.0
    seed: int = 1
    mode: str = "wait"
    # CPU time per unit of work (a word of WordCount, an event of the other jobs) spent on a deterministic
    # computation: the rounds that take this long on this machine are measured when the cluster starts
    # (work_rounds 0), or given
    work_us: float = 0.0
    work_rounds: int = 0
    # time waited per unit of work (as for an external call): a TaskManager's capacity is then
    # 1e6 / wait_us units/s whatever the machine's cores, so that TaskManagers add capacity
    wait_us: int = 0
    # cpu mode: each TaskManager's processes in a cgroup of this many cores (CFS quota per period)
    tm_cpu_limit: float = 0.0
    cpu_reading: str = "busy"

    def validate(self) -> "FlinkSettings":
        for key in ("jm_memory_mb", "tm_memory_mb", "words_per_sentence", "vocabulary"):
            if getattr(self, key) < 1:
                raise FlinkSettingsError(key, f"must be >= 1, got {getattr(self, key)}")
        for key in ("checkpoint_s", "heartbeat_interval_s", "heartbeat_timeout_s", "start_timeout_s", "stop_timeout_s"):
            _positive(key, getattr(self, key))
        for key in ("work_rounds", "wait_us"):
            if getattr(self, key) < 0:
                raise FlinkSettingsError(key, f"must be >= 0, got {getattr(self, key)}")
        for key in ("work_us", "tm_cpu_limit"):
            _non_negative(key, getattr(self, key))
        self._validate_mode()
        if self.job not in JOBS:
            raise FlinkSettingsError("job", f"must be one of {', '.join(JOBS)}, got {self.job!r}")
        for key in ("stabilization_s", "cooldown_s", "restart_delay_s", "zipf", "buffer_timeout_ms"):
            _non_negative(key, getattr(self, key))
        if self.rescale_max_delay_s is not None:
            _non_negative("rescale_max_delay_s", self.rescale_max_delay_s)
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise FlinkSettingsError("heartbeat_timeout_s", f"must exceed heartbeat_interval_s "
                                     f"({self.heartbeat_interval_s:g}), got {self.heartbeat_timeout_s:g}")
        if self.scheduler not in SCHEDULERS:
            raise FlinkSettingsError("scheduler", f"must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        if self.stop_mode not in STOP_MODES:
            raise FlinkSettingsError("stop_mode", f"must be one of {', '.join(STOP_MODES)}, got {self.stop_mode!r}")
        if self.jm_memory_mb < 512 or self.tm_memory_mb < 512:
            key = "jm_memory_mb" if self.jm_memory_mb < 512 else "tm_memory_mb"
            raise FlinkSettingsError(key, f"Flink needs at least 512 MB per process, got {getattr(self, key)}")
        return self

    def _validate_mode(self) -> None:
        if self.mode not in MODES:
            raise FlinkSettingsError("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.cpu_reading not in CPU_READINGS:
            raise FlinkSettingsError("cpu_reading", f"must be one of {', '.join(CPU_READINGS)}, got "
                                     f"{self.cpu_reading!r}")
        if self.cpu_reading == "cgroup" and self.mode != "cpu":
            raise FlinkSettingsError("cpu_reading", "the cgroup's CPU is read only where there is one (mode=cpu), "
                                     f"got mode {self.mode}")
        if self.mode == "wait":
            if self.tm_cpu_limit > 0:
                raise FlinkSettingsError("tm_cpu_limit", f"a CPU limit is the cpu mode's (mode=cpu), got "
                                         f"{self.tm_cpu_limit:g} in mode wait")
            return
        if self.tm_cpu_limit < MIN_CPU_LIMIT:
            raise FlinkSettingsError("tm_cpu_limit", f"mode cpu needs a CPU limit of at least {MIN_CPU_LIMIT:g} "
                                     f"cores, got {self.tm_cpu_limit:g}")
        if self.work_us <= 0 and self.work_rounds == 0:
            raise FlinkSettingsError("work_us", "mode cpu needs CPU work per word (work_us > 0 or work_rounds > 0)")
        if self.wait_us > 0:
            raise FlinkSettingsError("wait_us", f"mode cpu spends CPU, it does not wait: must be 0, got {self.wait_us}")

    @property
    def spec(self) -> JobSpec:
        """The job's description: what it runs and where the testbed reads it."""
        return JOBS[self.job]

    @property
    def units(self) -> int:
        """Counted units per source record (a sentence's words for WordCount, else 1)."""
        return units_per_record(self.spec, self.words_per_sentence)

    @property
    def cpu_limited(self) -> bool:
        """Each TaskManager runs in a cgroup with a CPU quota."""
        return self.mode == "cpu"

    def check_installed(self) -> None:
        if not (Path(self.flink_home) / "bin" / "standalone-job.sh").is_file():
            raise FlinkSettingsError("flink_home", f"no Flink at {self.flink_home}: run `bash infra/flink.sh install`")
        if not Path(self.job_jar).is_file():
            raise FlinkSettingsError("job_jar", f"{self.job_jar} missing: run `bash infra/flink.sh build`")

    def as_dict(self) -> Dict[str, Any]:
        """For a run's record: every setting, paths as strings."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}


def from_mapping(values: Mapping[str, Any]) -> FlinkSettings:
    """Settings from a mapping of keys (e.g. a config section); an unknown key fails, naming it."""
    fields = {f.name: f for f in dataclasses.fields(FlinkSettings)}
    kwargs: Dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise FlinkSettingsError(key, f"unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = _coerce(key, value, getattr(FlinkSettings, key, None))
    return FlinkSettings(**kwargs).validate()


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, Path):
        return Path(value)
    if key == "rescale_max_delay_s" and value is None:
        return None
    target = str if isinstance(default, str) else (int if isinstance(default, int) else float)
    if target is not str and isinstance(value, bool):
        raise FlinkSettingsError(key, f"must be a number, got {value!r}")
    try:
        converted = target(value)
    except (TypeError, ValueError):
        raise FlinkSettingsError(key, f"must be {target.__name__}, got {value!r}") from None
    if target is int and isinstance(value, float) and value != converted:
        raise FlinkSettingsError(key, f"must be a whole number, got {value!r}")
    return converted


def _positive(key: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise FlinkSettingsError(key, f"must be > 0, got {value:g}")


def _non_negative(key: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise FlinkSettingsError(key, f"must be >= 0, got {value:g}")


def flink_config(s: FlinkSettings, work_dir: Path, java_opts: str, parallelism: int = 1) -> Dict[str, str]:
    """The cluster's config.yaml (flat keys); per-process ports are passed as -D options. `parallelism`:
    the adaptive scheduler's initial parallelism of every vertex but the source (reactive mode takes
    every slot there is instead)."""
    tmp = str((work_dir / "tmp").resolve())
    conf = {
        # every process's scratch files (the RPC system's jar, the blob and shuffle directories) in
        # the cluster's own folder, not /tmp: a killed process leaves its own behind (24 MB or more)
        "io.tmp.dirs": tmp,
        # application mode copies the job jar here and keeps a copy of the same name that exists
        # already: the default (/opt/flink/artifacts) would run a stale jar after a rebuild
        "user.artifacts.base-dir": str((work_dir / "artifacts").resolve()),
        "env.java.opts.all": f"{java_opts} -Djava.io.tmpdir={tmp}".strip(),
        "jobmanager.rpc.address": "localhost",
        "jobmanager.bind-host": "localhost",
        "taskmanager.host": "localhost",
        "taskmanager.bind-host": "localhost",
        "rest.address": "localhost",
        "rest.bind-address": "localhost",
        "jobmanager.memory.process.size": f"{s.jm_memory_mb}m",
        "taskmanager.memory.process.size": f"{s.tm_memory_mb}m",
        "taskmanager.numberOfTaskSlots": "1",
        # no managed memory (the heap state backend does not use it) and a smaller metaspace, so that a
        # small TaskManager still has a task heap: Flink's defaults need about 1 GB per process
        "taskmanager.memory.managed.size": "0m",
        "taskmanager.memory.jvm-metaspace.size": "160m",
        "taskmanager.memory.jvm-overhead.min": "128m",
        **_scheduler(s, parallelism),
        "jobmanager.adaptive-scheduler.submission.resource-stabilization-timeout": _ms(s.stabilization_s),
        "jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout": _ms(s.stabilization_s),
        "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": _ms(s.cooldown_s),
        "execution.checkpointing.interval": _ms(s.checkpoint_s),
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": (work_dir / "checkpoints").resolve().as_uri(),
        "execution.checkpointing.num-retained": "2",
        "heartbeat.interval": str(int(s.heartbeat_interval_s * 1000)),
        "heartbeat.timeout": str(int(s.heartbeat_timeout_s * 1000)),
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "2147483647",
        "restart-strategy.fixed-delay.delay": _ms(s.restart_delay_s),
        "execution.buffer-timeout.interval": f"{int(round(s.buffer_timeout_ms))} ms",
        "metrics.fetcher.update-interval": "1000",
        "web.refresh-interval": "250",  # the REST API's job status is cached this long (default 3 s)
        "metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
        "execution.shutdown-on-application-finish": "false",
    }
    if s.rescale_max_delay_s is not None:
        conf["jobmanager.adaptive-scheduler.rescale-trigger.max-delay"] = _ms(s.rescale_max_delay_s)
    return conf


def _scheduler(s: FlinkSettings, parallelism: int) -> Dict[str, str]:
    if s.scheduler == "reactive":
        return {"scheduler-mode": "reactive"}
    # the adaptive scheduler runs each vertex at most at its requirement's upper bound; the job is
    # submitted at `parallelism` and its requirements are changed through the REST API
    return {"jobmanager.scheduler": "adaptive", "parallelism.default": str(parallelism)}


def _ms(seconds: float) -> str:
    return f"{int(round(seconds * 1000))} ms"
