"""One Flink application cluster (docs/flink.md): a JobManager running one of the jobs (settings.job:
WordCount, YSB or Traffic Monitoring), TaskManagers of one slot each started and stopped on demand,
metrics read from the REST API and each process's Prometheus endpoint. In reactive mode the job runs
in every slot there is; under the adaptive scheduler (`settings.scheduler`) each vertex at its resource
requirement (`require`).

    with FlinkCluster(settings, schedule, work_dir) as cluster:
        cluster.start()                        # the JobManager; the job waits for a TaskManager
        cluster.add_taskmanager()              # parallelism 1 ...
        cluster.wait_until(lambda r: r.parallelism == 1, "the job runs at parallelism 1")
        reading = cluster.read()               # status, parallelism, per-TaskManager metrics, source lag

Leaving the block (an exception, Ctrl-C) stops every process it started; so does the interpreter's
exit, and a controller killed outright takes its JVMs with it (testbed/flink/processes.py)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import yaml

from testbed.flink import processes
from testbed.flink.cgroups import CgroupError, ClusterCgroups, detect
from testbed.flink.faults import NO_JOB, why_not_started
from testbed.flink.metrics import (
    JobReading,
    MetricsFormatError,
    TaskManagerReading,
    VertexState,
    parse_prometheus,
    read_taskmanager,
)
from testbed.flink.processes import FlinkProcess, free_port
from testbed.flink.schedule import RateSchedule
from testbed.flink.settings import FLINK_VERSION, FlinkSettings, FlinkSettingsError, flink_config
from testbed.flink.vertices import of_job, requirements_body
from testbed.flink.work import WordCost, word_cost

log = logging.getLogger(__name__)
_LOG_FILES = ("log4j-console.properties", "logback-console.xml")


def last_error(log: Path) -> str:
    """The log's last line that looks like an error (else its last line), shortened."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "Exception" in ln or "ERROR" in ln]
    line = (errors or lines or ["empty log"])[-1]
    return line[:300]


class FlinkClusterError(RuntimeError):
    """The cluster did not do what was asked in time; says what and where its log is."""


class FlinkCluster:
    def __init__(self, settings: FlinkSettings, schedule: RateSchedule, work_dir: Path):
        self.settings = settings.validate()
        self.schedule = schedule
        self.work_dir = Path(work_dir)
        self.job_id = uuid.uuid4().hex
        self.rest_port = 0
        self.jobmanager: Optional[FlinkProcess] = None
        self.taskmanagers: Dict[str, FlinkProcess] = {}
        self.started: Dict[str, FlinkProcess] = {}  # every process ever started (stopped ones too)
        self.word_cost: Optional[WordCost] = None  # the job's work per word, once the JobManager started
        self.cgroups: Optional[ClusterCgroups] = None  # the TaskManagers' CPU limits (mode cpu)
        self._next_tm = 1
        self._t0 = time.monotonic()
        self.parallelism = 1  # the adaptive scheduler's initial parallelism (set by start)
        self.ran = False  # the job's counting vertex has run (a failure before that is a start that fails)

    def __enter__(self) -> "FlinkCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def now(self) -> float:
        return time.monotonic() - self._t0

    # -- processes ---------------------------------------------------------------------------------
    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(FLINK_CONF_DIR=str(self.work_dir / "conf"), FLINK_LOG_DIR=str(self.work_dir / "log"),
                   FLINK_PID_DIR=str(self.work_dir / "run"))
        env.pop("FLINK_HOME", None)  # the scripts find their own home
        return env

    def _write_conf(self, ports: Dict[str, int]) -> None:
        home = Path(self.settings.flink_home)
        conf_dir = self.work_dir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "run").mkdir(exist_ok=True)
        (self.work_dir / "tmp").mkdir(exist_ok=True)
        for name in _LOG_FILES:
            (conf_dir / name).write_bytes((home / "conf" / name).read_bytes())
        defaults = yaml.safe_load((home / "conf" / "config.yaml").read_text()) or {}
        java_opts = defaults.get("env", {}).get("java", {}).get("opts", {}).get("all", "")
        conf = flink_config(self.settings, self.work_dir, java_opts, self.parallelism)
        conf.update({key: str(port) for key, port in ports.items()})  # every process reads these
        (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf, default_flow_style=False, sort_keys=True))

    def start(self, parallelism: int = 1) -> None:
        """The JobManager with the job (it waits for TaskManagers); returns once its REST API answers.
        `parallelism`: the adaptive scheduler's initial parallelism (reactive mode takes every slot)."""
        self.parallelism = parallelism
        self._launch_jobmanager()
        self.wait_until(lambda r: "rest" not in r.errors, "the JobManager's REST API answers", read=self._rest_only)

    def _launch_jobmanager(self) -> None:
        if self.jobmanager is not None:
            raise FlinkClusterError("the JobManager runs already")
        self.settings.check_installed()
        self.word_cost = word_cost(self.settings)
        if self.settings.cpu_limited:
            self._make_cgroups()
        self.rest_port, prom = free_port(), free_port()
        self._write_conf({"rest.port": self.rest_port, "jobmanager.rpc.port": free_port()})
        schedule_file = self.schedule.write(self.work_dir / "schedule.txt")
        s = self.settings
        argv = [str(Path(s.flink_home) / "bin" / "standalone-job.sh"), "start-foreground",
                "--job-classname", s.spec.job_class, "--jars", str(Path(s.job_jar).resolve()), "--job-id", self.job_id,
                f"-Dmetrics.reporter.prom.port={prom}",
                "--schedule", str(schedule_file), "--words-per-sentence", str(s.words_per_sentence),
                "--vocabulary", str(s.vocabulary), "--zipf", str(s.zipf), "--seed", str(s.seed),
                "--work-rounds", str(self.word_cost.rounds), "--wait-us", str(s.wait_us),
                "--ledger", str(self.work_dir / "emission-ledger.bin")]
        log_file = self.work_dir / "log" / "jobmanager.out"
        self.jobmanager = processes.launch("jobmanager", argv, self._env(), log_file, prom)
        self.started[self.jobmanager.name] = self.jobmanager

    def _make_cgroups(self) -> None:
        try:
            cgroups = ClusterCgroups(detect(), self.job_id[:12], self.settings.tm_cpu_limit)
            cgroups.create()
        except (CgroupError, OSError) as e:
            raise FlinkSettingsError("tm_cpu_limit", f"mode cpu: {e}") from None
        self.cgroups = cgroups

    def start_processes(self, taskmanagers: int) -> None:
        """Launches the JobManager and TaskManagers without waiting for any of them."""
        self._launch_jobmanager()
        for _ in range(taskmanagers):
            self.add_taskmanager()

    def add_taskmanager(self) -> str:
        """Starts one TaskManager (one slot); returns its name (= its resource id). Does not wait."""
        if self.jobmanager is None:
            raise FlinkClusterError("start the JobManager first")
        name = f"tm-{self._next_tm}"
        self._next_tm += 1
        prom = free_port()
        argv = [str(Path(self.settings.flink_home) / "bin" / "taskmanager.sh"), "start-foreground",
                f"-Dtaskmanager.resource-id={name}", f"-Dmetrics.reporter.prom.port={prom}"]
        joins = self.cgroups.add(name) if self.cgroups is not None else []
        proc = processes.launch(name, argv, self._env(), self.work_dir / "log" / f"{name}.out", prom, joins)
        self.taskmanagers[name] = self.started[name] = proc
        return name

    def stop_taskmanager(self, name: Optional[str] = None, mode: Optional[str] = None) -> str:
        """Stops a TaskManager (default: the newest) as `mode` says (default: settings.stop_mode)."""
        if not self.taskmanagers:
            raise FlinkClusterError("no TaskManager to stop")
        name = name or list(self.taskmanagers)[-1]
        proc = self.taskmanagers.pop(name)
        mode = mode or self.settings.stop_mode
        processes.stop(proc, graceful=(mode == "graceful"), timeout_s=self.settings.stop_timeout_s)
        if self.cgroups is not None:
            self.cgroups.remove(name)
        return name

    def close(self) -> None:
        """Stops every process of the cluster (TaskManagers and JobManager together)."""
        procs = self._procs()
        self.taskmanagers.clear()
        self.jobmanager = None
        if procs:
            processes.stop_all(procs, timeout_s=self.settings.stop_timeout_s)
        if self.cgroups is not None:
            self.cgroups.close()
        shutil.rmtree(self.work_dir / "tmp", ignore_errors=True)  # scratch only: logs and checkpoints stay

    def record(self) -> dict:
        """What a run records about its engine: the Flink version, the job, every setting (the stop mode and
        heartbeat among them), what gives a TaskManager its capacity (`capacity`: the mode, the work per
        word, the CPU limit and each TaskManager cgroup's CPU use), the schedule, the job id, where the
        logs are and every process started."""
        return {"engine": "flink", "flink_version": FLINK_VERSION, "job": self.settings.job,
                "job_class": self.settings.spec.job_class, "settings": self.settings.as_dict(),
                "capacity": self._capacity_record(),
                "schedule": {"times": list(self.schedule.times), "rates": list(self.schedule.rates)},
                "job_id": self.job_id, "work_dir": str(self.work_dir),
                "processes": {p.name: {"pid": p.pid, "prom_port": p.prom_port} for p in self.started.values()}}

    def _capacity_record(self) -> dict:
        s, cost, cgroups = self.settings, self.word_cost, self.cgroups
        usage = {}
        if cgroups is not None:
            for name in self.started:
                u = cgroups.usage(name)
                if u is not None:
                    usage[name] = dataclasses.asdict(u)
        return {"mode": s.mode, "wait_us": s.wait_us, "work": cost.as_dict() if cost is not None else None,
                "tm_cpu_limit": s.tm_cpu_limit if s.cpu_limited else None,
                "cgroups": cgroups.record() if cgroups is not None else None, "usage": usage}

    def _procs(self) -> List[FlinkProcess]:
        return ([self.jobmanager] if self.jobmanager else []) + list(self.taskmanagers.values())

    def pids(self) -> List[int]:
        return [p.pid for p in self._procs()]

    # -- reading -----------------------------------------------------------------------------------
    def _rest(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}{path}", timeout=3.0) as resp:
            return json.loads(resp.read().decode())

    def require(self, parallelism: Mapping[str, int]) -> None:
        """Sets the vertices' parallelism (the adaptive scheduler's resource requirements; by the
        policy's vertex names, testbed/flink/vertices.py). FlinkClusterError if Flink refuses it."""
        job, mapped = self._rest(f"/jobs/{self.job_id}"), of_job(self.settings.job)
        ids = {v.name: str(x["id"]) for x in job.get("vertices", []) if (v := mapped.vertex_of(str(x.get("name", ""))))}
        body = json.dumps(requirements_body(ids, parallelism)).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.rest_port}/jobs/{self.job_id}/resource-requirements",
                                         data=body, method="PUT", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5.0):
                pass
        except urllib.error.HTTPError as e:
            raise FlinkClusterError(f"Flink refused the resource requirements {dict(parallelism)}: HTTP {e.code} "
                                    f"{e.read().decode(errors='replace')[:300]}") from None

    def requirements(self) -> dict:
        """The job's resource requirements as Flink holds them (GET), per vertex id."""
        return self._rest(f"/jobs/{self.job_id}/resource-requirements")

    def _rest_only(self) -> JobReading:
        try:
            self._rest("/config")
            return JobReading(self.now(), NO_JOB, 0, ())
        except (OSError, ValueError) as e:
            return JobReading(self.now(), NO_JOB, 0, (), errors={"rest": str(e)})

    def _job_state(self, errors: Dict[str, str]) -> tuple:
        status, parallelism = NO_JOB, 0
        registered: Tuple[str, ...] = ()
        vertices: Tuple[VertexState, ...] = ()
        try:
            registered = tuple(sorted(tm["id"] for tm in self._rest("/taskmanagers").get("taskmanagers", [])))
            job = self._rest(f"/jobs/{self.job_id}")
            status = job.get("state", NO_JOB)
            vertices = tuple(VertexState(str(v.get("id", "")), str(v.get("name", "")), int(v.get("parallelism", 0)),
                                         str(v.get("status", ""))) for v in job.get("vertices", []))
            for v in vertices:
                if v.name.startswith(self.settings.spec.vertex) and v.status == "RUNNING":
                    parallelism = v.parallelism
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: the job does not exist yet
                errors["rest"] = str(e)
        except (OSError, ValueError) as e:
            errors["rest"] = str(e)
        return status, parallelism, registered, vertices

    def _scrape(self, proc: FlinkProcess, errors: Dict[str, str]):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.prom_port}/metrics", timeout=3.0) as resp:
                return read_taskmanager(proc.name, parse_prometheus(resp.read().decode()), self.settings.spec)
        except (OSError, MetricsFormatError) as e:
            errors[proc.name] = str(e)
            return None

    def _with_cgroup(self, tm: TaskManagerReading) -> TaskManagerReading:
        usage = self.cgroups.usage(tm.name) if self.cgroups is not None else None
        if usage is None:
            return tm
        return dataclasses.replace(tm, cgroup_cpu_s=usage.cpu_s, cgroup_throttled_s=usage.throttled_s)

    def read(self) -> JobReading:
        """The job's status and parallelism (REST) and every live TaskManager's metrics."""
        errors: Dict[str, str] = {}
        status, parallelism, registered, vertices = self._job_state(errors)
        tms = [self._with_cgroup(r) for r in (self._scrape(p, errors) for p in list(self.taskmanagers.values()))
               if r is not None]
        source = next((tm.source for tm in tms if tm.source is not None), None)
        self.ran = self.ran or parallelism > 0
        return JobReading(self.now(), status, parallelism, registered, tuple(tms), source, errors, vertices)

    def start_failure(self, status: str) -> Optional[str]:
        """What the JobManager says keeps the job from starting (faults.why_not_started); None while
        nothing says so, or the REST API cannot be read (not up yet, no such job yet)."""
        try:
            return why_not_started(self._rest, self.job_id, status, self.ran)
        except (OSError, ValueError):
            return None

    def _check_alive(self, what: str) -> None:
        """FlinkClusterError if a process exited that nobody stopped (with its log's last line)."""
        for p in self._procs():
            if not p.alive():
                raise FlinkClusterError(f"{p.name} exited (status {p.popen.returncode}) before {what}: "
                                        f"{last_error(p.log)} (log: {p.log})")
        if self.jobmanager is None:
            raise FlinkClusterError(f"the cluster was stopped before {what}")

    def wait_until(self, ok: Callable[[JobReading], bool], what: str, timeout_s: Optional[float] = None,
                   read: Optional[Callable[[], JobReading]] = None, every_s: float = 0.25) -> JobReading:
        """Reads until `ok` holds; FlinkClusterError naming `what` after timeout_s (default: the
        settings' start timeout), if a process exits, or once the JobManager says the job cannot start."""
        deadline = time.monotonic() + (self.settings.start_timeout_s if timeout_s is None else timeout_s)
        of_job = read is None  # the job's own readings (not the REST API's first answer): ask why it fails
        read = read or self.read
        while True:
            reading = read()
            if ok(reading):
                return reading
            self._check_alive(what)
            why = self.start_failure(reading.status) if of_job else None
            if why is not None:
                raise FlinkClusterError(f"the Flink job cannot start ({what} awaited): {why}; "
                                        f"see {self.work_dir / 'log'}")
            if time.monotonic() > deadline:
                raise FlinkClusterError(f"timed out before {what} (last: status {reading.status}, parallelism "
                                        f"{reading.parallelism}, errors {reading.errors}); see {self.work_dir / 'log'}")
            time.sleep(every_s)
