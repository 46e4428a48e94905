"""The worker containers of a live job run (operators/keyed_worker.py, one per worker, each with
its CPU quota): started and removed by index, the exited ones found, and the waits for the phase
each worker reports on the run's control key (idle, stopped, running, final)."""
from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from operators.keyed_job import redis_key, worker_name
from testbed.job.engine import Clock
from testbed.job_config import LiveJobConfig
from testbed.live.engines import INSTANCE_LABEL, OWNER_LABEL, RUN_LABEL, docker_name, owner
from testbed.live.job_cpu import find_usage_path
from testbed.live.job_faults import LiveJobError
from testbed.live.job_routing import last_log_line

log = logging.getLogger(__name__)

WORKER_ENTRYPOINT = ["/bin/sh", "-c", "trap '' TERM; exec python3 -m operators.keyed_worker"]
PHASE_POLL_S = 0.1


@dataclass
class WorkerContainer:
    index: int
    container: Any  # docker SDK Container
    usage_path: Optional[Path]
    started_at: float  # run time the start was asked
    running_at: Optional[float] = None


Exit = Tuple[int, WorkerContainer, int]  # (worker index, its container, exit code)
OnExit = Callable[[List[Exit], str], None]


def exit_why(wc: WorkerContainer, code: int) -> str:
    """How a worker's container ended: its exit code and (unless killed) its last log line."""
    try:
        said = last_log_line(wc.container.logs(tail=5).decode(errors="replace"))
    except Exception:
        said = ""
    how = " (SIGKILL)" if code == 137 else ""
    return f"exited with code {code}{how}" + (f", last log line: {said}" if said and code != 137 else "")


def exit_message(w: int, wc: WorkerContainer, code: int) -> str:
    return f"worker {worker_name(w)} (container {wc.container.name}) {exit_why(wc, code)}"


class Workers:
    """The run's current worker containers by index, and a log of every start and removal."""

    def __init__(self, docker: Any, prefix: str, settings: LiveJobConfig, env: Callable[[int], Dict[str, str]],
                 network_mode: Optional[str]) -> None:
        self.docker, self.prefix, self.settings = docker, prefix, settings
        self.env, self.network_mode = env, network_mode
        self.lock = threading.Lock()
        self.current: Dict[int, WorkerContainer] = {}
        self.log: List[dict] = []
        self._incarnation = itertools.count()  # container names stay unique while a removed one goes

    def snapshot(self) -> Dict[int, WorkerContainer]:
        with self.lock:
            return dict(self.current)

    def _start_one(self, w: int, name: str, t: float) -> WorkerContainer:
        c = self.docker.containers.run(
            self.settings.image, entrypoint=WORKER_ENTRYPOINT, detach=True, init=True, name=name,
            environment=self.env(w),
            labels={RUN_LABEL: self.prefix, INSTANCE_LABEL: worker_name(w), OWNER_LABEL: owner()},
            nano_cpus=int(self.settings.cpus * 1e9), network_mode=self.network_mode)
        return WorkerContainer(w, c, find_usage_path(c.id), t)

    def start(self, indices: Iterable[int], t: float) -> None:
        # names are drawn here, in order: the starts run in parallel
        named = [(w, docker_name(self.prefix, "w", w, next(self._incarnation))) for w in indices]
        if not named:
            return
        with ThreadPoolExecutor(max_workers=min(4, len(named))) as pool:
            for wc in pool.map(lambda wn: self._start_one(wn[0], wn[1], t), named):
                self.add(wc)

    def add(self, wc: WorkerContainer) -> None:
        with self.lock:
            self.current[wc.index] = wc
        self.log.append({"worker": worker_name(wc.index), "container": wc.container.name, "requested_at": wc.started_at,
                         "cgroup": str(wc.usage_path or "")})

    def remove(self, indices: Iterable[int], t: float) -> None:
        gone = []
        with self.lock:
            for w in indices:
                wc = self.current.pop(w, None)
                if wc is not None:
                    gone.append(wc)
        for wc in gone:
            self.log.append({"worker": worker_name(wc.index), "container": wc.container.name, "removed_at": t})
        for wc in gone:  # in the background: a removal on a loaded engine takes seconds
            threading.Thread(target=_remove, args=(wc,), daemon=True).start()

    def exited(self) -> List[Exit]:
        """The run's current workers whose container has exited."""
        with self.lock:
            by_id = {wc.container.id: (w, wc) for w, wc in self.current.items()}
        out = []
        for c in self.docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.prefix}",
                                                                "status": ["exited", "dead"]}):
            if c.id in by_id:
                w, wc = by_id[c.id]
                out.append((w, wc, int(c.attrs.get("State", {}).get("ExitCode", -1))))
        return sorted(out, key=lambda e: e[0])

    def name(self, w: int) -> str:
        """The container of worker w ("" when none runs)."""
        wc = self.current.get(w)
        return wc.container.name if wc is not None else ""


def _remove(wc: WorkerContainer) -> None:
    try:
        wc.container.remove(force=True)
    except Exception as exc:  # the run's cleanup tries again
        log.warning("removing %s: %s", wc.container.name, exc)


class PhaseWait:
    """Waits until workers report a phase on Redis (hash `phase`), bounded. `check`: raises the
    run's fault, if any; `diagnose`: raises what explains a worker's exit (a broker or Redis
    failure); `redis_lost`: a restarted Redis forgot the phases, which explains a timeout."""

    def __init__(self, workers: Workers, redis: Any, clock: Clock, now: Callable[[], float],
                 check: Callable[[], None], diagnose: Callable[[], None],
                 redis_lost: Callable[[], Optional[str]]) -> None:
        self.workers, self.redis, self.clock, self.now = workers, redis, clock, now
        self.check, self.diagnose, self.redis_lost = check, diagnose, redis_lost

    def __call__(self, indices: Iterable[int], phase: str, timeout_s: float, what: str,
                 on_exit: Optional[OnExit] = None) -> List[int]:
        """Until the workers report `phase`. One that exits meanwhile ends the run naming it, or with
        `on_exit` is handed to it and no longer waited for; returns those (their indices)."""
        wanted: List[int] = list(indices)
        left: List[int] = []
        deadline = self.clock.now() + timeout_s
        while True:
            names = [worker_name(w) for w in wanted]
            raw = self.redis.hmget(redis_key(self.workers.prefix, "phase"), names) if names else []
            got = [(r or b"").decode() for r in raw]
            if all(g == phase for g in got):
                return left
            self.check()
            exited = [e for e in self.workers.exited() if e[0] in set(wanted)]
            if exited:
                self.diagnose()
                if on_exit is None:
                    raise LiveJobError(f"{exit_message(*exited[0])} during {what} at t={self.now():.0f} s")
                on_exit(exited, what)
                left += [e[0] for e in exited]
                wanted = [w for w in wanted if w not in left]
                continue
            if self.clock.now() > deadline:
                self._timed_out(names, got, phase, timeout_s, what)
            self.clock.sleep(PHASE_POLL_S)

    def _timed_out(self, names: List[str], got: List[str], phase: str, timeout_s: float, what: str) -> None:
        lost = self.redis_lost()
        if lost:
            raise LiveJobError(lost)
        late = [n for n, g in zip(names, got, strict=True) if g != phase]
        raise LiveJobError(f"workers {late} did not report {phase!r} within {timeout_s:.0f} s ({what}, "
                           f"t={self.now():.0f} s)")
