"""A worker that exits during a live job's restart (a controller's rescale or a recovery;
docs/papers/daedalus.md#faults-during-a-live-job-run), on a world of fakes: the workers answer the
control key at once unless one is scripted to exit at a phase. Within the recovery budget the restart
replaces it and goes on (one meant to go with a scale-in just goes), and records a recovery; past
the budget the run ends naming the worker; one that exits once the job runs again is left to the
control loop's watchdog. The live runs with a worker killed: tests/integration/test_live_job_faults.py."""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import pytest

from testbed.job.series import JobSeries
from testbed.job_config import LiveJobConfig
from testbed.live.job import LiveJobError, LiveJobRun, WorkerContainer


class Container:
    def __init__(self, cid: str, name: str):
        self.id, self.name = cid, name
        self.attrs = {"State": {"ExitCode": 0}}

    def logs(self, tail=5):
        return b""

    def remove(self, force=False):
        pass


class World:
    """Redis' control and phase keys, the engine's containers and the workers' answers. `die`:
    phase verb ("stop", "start", "run") -> workers whose container exits (SIGKILL) when asked for it,
    once each."""

    def __init__(self, run: LiveJobRun, n: int, die: Dict[str, List[int]]):
        self.run, self.die = run, {k: list(v) for k, v in die.items()}
        self.phases: Dict[str, str] = {}
        self.exited: List[Container] = []
        self.started: List[Tuple[int, str]] = []
        self.count = 0
        for w in range(n):
            self.start(w)
            self.phases[f"w{w}"] = "running:1"

    def start(self, w: int) -> None:
        self.count += 1
        c = Container(f"c{self.count}", f"p-w-{w}-{self.count}")
        self.run.workers[w] = WorkerContainer(w, c, None, 0.0)
        self.started.append((w, c.name))
        self.phases[f"w{w}"] = ""
        self.answer(w, "start", "idle:")

    def answer(self, w: int, verb: str, phase: str) -> None:
        if w in self.die.get(verb, []):
            self.die[verb].remove(w)
            c = self.run.workers[w].container
            c.attrs["State"]["ExitCode"] = 137
            self.exited.append(c)
        else:
            self.phases[f"w{w}"] = phase

    # -- what the run asks of Redis and the engine
    def set(self, key: str, value: str) -> None:
        verb, _, epoch = value.partition(":")
        for w, wc in list(self.run.workers.items()):
            if wc.container not in self.exited:
                self.answer(w, verb, {"stop": "stopped", "run": "running"}[verb] + f":{epoch}")

    def hmget(self, key: str, names: List[str]):
        if key.endswith("lastcommit"):
            return [f"{100 + int(n[1:])}".encode() for n in names]
        return [self.phases.get(n, "").encode() for n in names]

    def list(self, all=False, filters=None):
        return list(self.exited)


def restart_world(n: int, die: Dict[str, List[int]], max_recoveries: int = 3):
    run = LiveJobRun.__new__(LiveJobRun)
    run.prefix, run.run_id, run._lock, run._t0 = "p", "r", threading.Lock(), None
    run.workers, run.recoveries, run.records, run.instance_log = {}, [], [], []
    run.settings = LiveJobConfig(max_recoveries=max_recoveries, stop_timeout_s=2.0, start_timeout_s=2.0)
    run.n, run.epoch, run.series, run.ready_from, run._rolled_back = n, 1, JobSeries(4), {}, 0
    run.fault, run._source, run._router, run.sampler_error = None, None, None, None
    world = World(run, n, die)
    run.redis = world
    run.docker = SimpleNamespace(containers=world)
    run._diagnose_worker_exit = lambda: None  # the broker and Redis are fine
    run._processed_total = run._committed_total = lambda: 0
    run._bind = lambda bind, unbind: None
    moves: List[frozenset] = []
    run._move = lambda old, drop=frozenset(): (moves.append(drop), (0, 0))[1]
    run._start_workers = lambda indices, t: [world.start(w) for w in indices]
    router = SimpleNamespace(pause=lambda timeout_s: True, resume=lambda queued, limit: None)
    return run, world, router, moves


def test_a_worker_killed_while_the_world_stops_for_a_scale_out_is_replaced_within_the_restart():
    run, world, router, moves = restart_world(2, {"stop": [1]})
    info = run._restart(10.0, 3, router, drawn_s=0.0)
    assert run.n == 3 and sorted(run.workers) == [0, 1, 2]
    assert [w for w, _ in world.started[2:]] == [1, 2]  # w1 again, under a new container, and the new w2
    assert moves == [frozenset({101})]  # what w1's last checkpoint committed is dropped, not processed again
    [rec] = run.recoveries
    assert rec["worker"] == "w1" and rec["exit_code"] == 137 and rec["container"] == "p-w-1-2"
    assert rec["during"] == "the stop-the-world of the restart 2 -> 3" and rec["downtime_s"] == info["downtime_s"]
    [action] = run.records
    assert (action.action, action.instance) == ("replace", "w1")
    assert "code 137 (SIGKILL)" in action.reason and "replaced within the restart" in action.reason
    assert run._exited() == []  # nothing left for the watchdog


def test_a_worker_killed_that_a_scale_in_removes_anyway_is_not_replaced():
    run, world, router, _ = restart_world(3, {"stop": [2]})
    run._restart(10.0, 2, router)
    assert run.n == 2 and sorted(run.workers) == [0, 1] and len(world.started) == 3  # nothing started
    [action] = run.records
    assert "not replaced, the rescale removes it" in action.reason


def test_a_new_worker_that_exits_before_it_is_idle_is_started_again():
    run, world, router, moves = restart_world(2, {"start": [2]})
    run._restart(10.0, 3, router)
    assert [w for w, _ in world.started[2:]] == [2, 2] and run.n == 3
    assert moves == [frozenset()]  # it never consumed: nothing of it to drop
    assert [r["during"] for r in run.recoveries] == ["the restart's start of the restart 2 -> 3"]


def test_past_the_budget_a_worker_killed_during_a_rescale_ends_the_run_naming_it():
    run, _world, router, _ = restart_world(2, {"stop": [1]}, max_recoveries=0)
    with pytest.raises(LiveJobError) as err:
        run._restart(10.0, 3, router)
    msg = str(err.value)
    assert msg.startswith("worker w1 (container p-w-1-2) exited with code 137 (SIGKILL) during the "
                          "stop-the-world of the restart 2 -> 3 at t=0 s"), msg
    assert "max_recoveries = 0" in msg and "\n" not in msg


def test_a_recoverys_own_replacements_count_against_the_budget():
    run, world, router, _ = restart_world(3, {"stop": [2]}, max_recoveries=1)
    run.workers.pop(0)  # w0 exited: the recovery replaces it, which spends the whole budget
    with pytest.raises(LiveJobError, match="with 1 worker"):
        run._restart(10.0, 3, router, replace=[0])


def test_a_worker_that_exits_once_the_job_runs_again_is_left_to_the_watchdog():
    run, world, router, _ = restart_world(2, {"run": [0]})
    run._restart(10.0, 2, router)
    assert run.recoveries == [] and run.records == []
    exited: Optional[list] = run._exited()
    assert exited is not None and [(w, code) for w, _wc, code in exited] == [(0, 137)]
