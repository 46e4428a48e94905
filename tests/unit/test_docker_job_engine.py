"""The live job's worker containers as the job loop's engine (testbed/live/docker_job_engine.py;
docs/papers/daedalus.md#faults-during-a-live-job-run), on a world of fakes and a fake clock: the
containers and Redis' control and phase keys of a `World` whose workers answer the control key at
once (unless one is scripted to exit at a phase, or never to come up), a broker that records what
it is asked, and a sampler that makes one row per second of the clock from the engine's state.

A worker that exits during a restart is replaced within it (one meant to go with a scale-in just
goes) and recorded as a recovery; past the budget the run ends naming it; one that exits once the
job runs again is the loop's lost worker, replaced by a restart at the same parallelism. A
rescale whose new worker never comes up ends the run with its reason; rows go on while a restart
blocks and the decisions that fell due meanwhile are skipped. The live runs:
tests/integration/test_live_job.py and test_live_job_faults.py."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import numpy as np
import pytest

from testbed.job.engine import Second, StepClock
from testbed.job.ledger import JobLedger
from testbed.job.loop import JobLoop, LoopSettings
from testbed.job_config import JobConfig, LiveJobConfig
from testbed.live.docker_job_engine import DockerJobEngine, DockerParts, Feed
from testbed.live.job_faults import FaultWatch, LiveJobError
from testbed.live.job_workers import Workers
from testbed.model import ScaleTo
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot

TOP = 4


class Clock(StepClock):
    """A fake clock whose sleeps advance it and let the sampler take the rows of the seconds ended."""

    def __init__(self) -> None:
        super().__init__(100.0)
        self.ticks: List[Callable[[], None]] = []

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        for tick in self.ticks:
            tick()


class Container:
    def __init__(self, cid: str, name: str, env: Dict[str, str]) -> None:
        self.id, self.name, self.env = cid, name, env
        self.attrs = {"State": {"ExitCode": 0}}

    def logs(self, tail: int = 5) -> bytes:
        return b""

    def remove(self, force: bool = False) -> None:
        pass


class World:
    """The engine's containers and Redis' control, phase and lastcommit keys. `die`: phase verb
    ("stop", "start", "run") -> workers whose container exits (SIGKILL) when asked for it, once
    each; `hang`: workers whose new container never reports idle."""

    def __init__(self, die: Optional[Dict[str, List[int]]] = None, hang: Tuple[int, ...] = ()) -> None:
        self.die = {k: list(v) for k, v in (die or {}).items()}
        self.hang = set(hang)
        self.phases: Dict[str, str] = {}
        self.live: Dict[int, Container] = {}  # the newest container of each worker
        self.exited: List[Container] = []
        self.started: List[Tuple[int, str]] = []
        self.control = ""

    # -- the engine's containers
    @property
    def containers(self) -> "World":
        return self

    def run(self, image: str, **kw: Any) -> Container:
        w = int(kw["environment"]["WORKER"])
        c = Container(f"c{len(self.started) + 1}", kw["name"], kw["environment"])
        self.started.append((w, c.name))
        self.live[w] = c
        self.phases[f"w{w}"] = ""
        if w not in self.hang:
            self.answer(w, "start", "idle:")
        return c

    def list(self, all: bool = False, filters: Optional[dict] = None) -> List[Container]:
        return list(self.exited)

    def kill(self, w: int) -> None:
        c = self.live[w]
        c.attrs["State"]["ExitCode"] = 137
        self.exited.append(c)

    def answer(self, w: int, verb: str, phase: str) -> None:
        if w in self.die.get(verb, []):
            self.die[verb].remove(w)
            self.kill(w)
        else:
            self.phases[f"w{w}"] = phase

    # -- Redis
    def set(self, key: str, value: str) -> None:
        self.control = value
        verb, _, epoch = value.partition(":")
        for w, c in list(self.live.items()):
            if c not in self.exited and self.phases.get(f"w{w}") != "":
                self.answer(w, verb, {"stop": "stopped", "run": "running"}[verb] + f":{epoch}")

    def hmget(self, key: str, names: List[str]) -> List[bytes]:
        if key.endswith("lastcommit"):
            return [f"{100 + int(n[1:])}".encode() for n in names]
        return [self.phases.get(n, "").encode() for n in names]

    def hvals(self, key: str) -> List[bytes]:
        return []

    def info(self, section: str) -> Dict[str, str]:
        return {"run_id": "redis-1"}

    def exists(self, key: str) -> int:
        return 1


@dataclass
class Broker:
    binds: List[Tuple[List[int], List[int]]] = field(default_factory=list)
    drops: List[FrozenSet[int]] = field(default_factory=list)

    def bind(self, bind: List[int], unbind: List[int]) -> None:
        self.binds.append((list(bind), list(unbind)))

    def move(self, old: int, drop: FrozenSet[int] = frozenset()) -> Tuple[int, int]:
        self.drops.append(drop)
        return 0, 0


class Sampler:
    """One row per second of the clock from the engine's state: down in a restart, backlog 100
    then, 5 once it runs."""

    def __init__(self, engine: DockerJobEngine, clock: Clock, t0: float) -> None:
        self.engine, self.clock, self.t0 = engine, clock, t0
        self.rows: List[Second] = []
        clock.ticks.append(self.tick)

    def tick(self) -> None:
        while len(self.rows) < math.floor(self.clock.now() - self.t0 + 1e-9):
            st = self.engine.job_state()
            thr, cpu = np.zeros(TOP), np.full(TOP, np.nan)
            cpu[:st.n] = 0.5
            self.rows.append(Second(arrivals=10.0, thr=thr, cpu=cpu, lag=100.0 if st.down else 5.0,
                                    uptime=0.0 if st.down else 1.0, parallel=st.n, running=0 if st.down else st.n))

    def stop(self, timeout_s: float) -> None:
        pass


def fake_part() -> Any:
    return SimpleNamespace(error=None, emitted=0, per_second=[], forwarded=0, stop=lambda: None, close=lambda: None,
                           pause=lambda timeout_s: True, resume=lambda queued, limit: None)


def engine_on(world: World, max_recoveries: int = 3, downtime: float = 0.0,
              clock: Optional[Clock] = None) -> Tuple[DockerJobEngine, Broker]:
    clock = clock or Clock()
    settings = LiveJobConfig(max_recoveries=max_recoveries, stop_timeout_s=2.0, start_timeout_s=2.0)
    job = JobConfig(max_scaleout=TOP, downtime_out_s=[downtime, downtime], downtime_in_s=[downtime, downtime])
    workers = Workers(world, "p", settings, lambda w: {"WORKER": str(w)}, None)
    broker = Broker()
    engine: DockerJobEngine

    def launch(n: int, t0: float) -> Feed:
        return Feed(fake_part(), fake_part(), Sampler(engine, clock, t0))

    faults = FaultWatch("amqp://fake", world, "p", lambda: engine.now(), connect=lambda url: fake_part())
    faults.remember_redis()
    parts = DockerParts(workers, broker, world, faults, clock, launch)
    engine = DockerJobEngine(parts, settings, job, JobLedger(), {n: 150.0 * n for n in range(1, TOP + 1)},
                             np.random.default_rng(0), lambda message: None)
    return engine, broker


def started_engine(n: int, die: Dict[str, List[int]], max_recoveries: int = 3) -> Tuple[DockerJobEngine, World, Broker]:
    world = World(die)
    engine, broker = engine_on(world, max_recoveries)
    engine.start(n)
    return engine, world, broker


# -- a worker that exits during a restart -------------------------------------------------------------
def test_a_worker_killed_while_the_world_stops_for_a_scale_out_is_replaced_within_the_restart() -> None:
    engine, world, broker = started_engine(2, {"stop": [1]})
    engine.rescale(9, 3)
    assert engine.n == 3 and sorted(engine.workers.current) == [0, 1, 2]
    # w1 again, under a new container, and the new w2: started side by side, in either order
    assert sorted(w for w, _ in world.started[2:]) == [1, 2]
    assert broker.drops == [frozenset({101})]  # what w1's last checkpoint committed is dropped, not processed again
    [rec] = engine.ledger.recoveries
    assert rec.worker == "w1" and rec.details["exit_code"] == 137 and rec.details["container"] == "p-w-1-1"
    assert rec.details["during"] == "the stop-the-world of the restart 2 -> 3"
    assert rec.downtime_s == engine.ledger.rescales["downtime_s"][0] and rec.replaced_by == dict(world.started[2:])[1]
    replace, restart = engine.ledger.records
    assert (replace.action, replace.instance, restart.action) == ("replace", "w1", "restart")
    assert "code 137 (SIGKILL)" in replace.reason and "replaced within the restart" in replace.reason
    assert engine.workers.exited() == []  # nothing left for the loop


def test_a_worker_killed_that_a_scale_in_removes_anyway_is_not_replaced() -> None:
    engine, world, _ = started_engine(3, {"stop": [2]})
    engine.rescale(9, 2)
    assert engine.n == 2 and sorted(engine.workers.current) == [0, 1] and len(world.started) == 3  # nothing started
    assert "not replaced, the rescale removes it" in engine.ledger.records[0].reason
    assert engine.ledger.recoveries[0].replaced_by == ""


def test_a_new_worker_that_exits_before_it_is_idle_is_started_again() -> None:
    engine, world, broker = started_engine(2, {"start": [2]})
    engine.rescale(9, 3)
    assert [w for w, _ in world.started[2:]] == [2, 2] and engine.n == 3
    assert broker.drops == [frozenset()]  # it never consumed: nothing of it to drop
    assert [r.details["during"] for r in engine.ledger.recoveries] == ["the restart's start of the restart 2 -> 3"]


def test_past_the_budget_a_worker_killed_during_a_rescale_ends_the_run_naming_it() -> None:
    engine, _world, _ = started_engine(2, {"stop": [1]}, max_recoveries=0)
    with pytest.raises(LiveJobError) as err:
        engine.rescale(9, 3)
    msg = str(err.value)
    assert msg.startswith("worker w1 (container p-w-1-1) exited with code 137 (SIGKILL) during the "
                          "stop-the-world of the restart 2 -> 3 at t=0 s"), msg
    assert "max_recoveries = 0" in msg and "\n" not in msg


def test_a_recoverys_own_replacements_count_against_the_budget() -> None:
    engine, world, _ = started_engine(3, {"stop": [2]}, max_recoveries=1)
    world.kill(0)  # w0 exited: the recovery replaces it, which spends the whole budget
    with pytest.raises(LiveJobError, match="with 1 worker"):
        engine._restart(10.0, 3, replace=[0])


def test_a_worker_that_exits_once_the_job_runs_again_is_left_to_the_loop() -> None:
    engine, world, _ = started_engine(2, {})
    world.die = {"run": [0]}  # when the restart lets the job run again
    engine.rescale(9, 2)
    assert engine.ledger.recoveries == [] and [r.action for r in engine.ledger.records] == ["restart"]
    assert [(w, code) for w, _wc, code in engine.workers.exited()] == [(0, 137)]


# -- the engine on the job loop ------------------------------------------------------------------------
class Scripted(Policy):
    """Asks for the parallelism `plan` gives at a decision's time; keeps what it saw."""

    name = "scripted"
    interval_s = 5.0

    def __init__(self, plan: Optional[Dict[float, int]] = None) -> None:
        self.plan = plan or {}
        self.seen: List[JobSnapshot] = []

    def decide_job(self, snapshot: JobSnapshot) -> list:
        self.seen.append(snapshot)
        n = self.plan.get(snapshot.t)
        return [ScaleTo(JOB_OPERATOR, n, "scripted")] if n else []


def loop_on(engine: DockerJobEngine, policy: Policy, duration: int,
            kill: Optional[List[Tuple[int, int]]] = None) -> JobLoop:
    """The loop over `duration` seconds from 2 workers; `kill`: (run second, worker whose container exits then)."""
    s = engine.settings
    settings = LoopSettings(duration=duration, top=TOP, window_s=10, checkpoint_s=2.0,
                            max_recoveries=s.max_recoveries, recoveries_key="backend.live.job.max_recoveries",
                            skip_missed_decisions=True)
    loop = JobLoop(engine, policy, settings, engine.clock, engine.ledger)
    world = engine.redis
    if kill:
        def tick() -> None:
            for k, w in list(kill):
                if engine.now() >= k:
                    kill.remove((k, w))
                    world.kill(w)
        engine.clock.ticks.append(tick)  # type: ignore[attr-defined]
    loop.start(2)
    return loop


def test_a_lost_worker_is_replaced_by_a_restart_at_the_same_parallelism() -> None:
    world = World()
    engine, broker = engine_on(world)
    loop = loop_on(engine, Scripted(), 20, kill=[(7, 1)])
    loop.run()
    assert loop.fault is None and len(loop.series) == 20 and engine.n == 2
    started = [w for w, _ in world.started]  # workers start side by side: in either order within a phase
    assert sorted(started[:2]) == [0, 1] and started[2:] == [1]  # w1 again, under a new container
    assert broker.drops[-1] == frozenset({101})  # what its last checkpoint committed is not processed again
    [rec] = loop.ledger.recoveries
    assert (rec.worker, rec.replaced_by) == ("w1", world.started[2][1]) and rec.t_s == pytest.approx(7.0, abs=1.0)
    assert "container p-w-1-1 exited with code 137 (SIGKILL)" in rec.why
    assert rec.downtime_s >= 0 and rec.details == {"container": "p-w-1-1", "exit_code": 137, "moved": 0,
                                                   "duplicates_dropped": 0}
    [replace] = loop.ledger.records
    assert (replace.action, replace.instance) == ("replace", "w1") and "137" in replace.reason
    assert len(loop.ledger.rescales["t_s"]) == 0  # a recovery is not the controller's rescale


def test_workers_lost_together_are_replaced_by_one_restart() -> None:
    world = World()
    engine, broker = engine_on(world)
    loop = loop_on(engine, Scripted(), 20, kill=[(7, 0), (7, 1)])
    loop.run()
    started = [w for w, _ in world.started]  # workers start side by side: in either order within a phase
    assert loop.fault is None and sorted(started[:2]) == sorted(started[2:]) == [0, 1]
    assert len(broker.drops) == 1 and broker.drops[0] == frozenset({100, 101})  # one restart
    assert [(r.worker, r.details["container"]) for r in loop.ledger.recoveries] == [("w0", "p-w-0-0"),
                                                                                    ("w1", "p-w-1-1")]
    assert [r.instance for r in loop.ledger.records] == ["w0", "w1"]


def test_a_lost_worker_past_the_budget_ends_the_run_naming_it() -> None:
    engine, _ = engine_on(World(), max_recoveries=0)
    loop = loop_on(engine, Scripted(), 20, kill=[(7, 1)])
    loop.run()
    assert loop.fault is not None and loop.fault.startswith("worker w1 lost at t=")
    assert "container p-w-1-1 exited with code 137" in loop.fault
    assert "backend.live.job.max_recoveries = 0" in loop.fault and len(loop.series) < 10


def test_a_rescale_that_never_completes_ends_the_run_with_its_reason() -> None:
    engine, _ = engine_on(World(hang=(2,)))
    loop = loop_on(engine, Scripted({5.0: 3}), 30)
    with pytest.raises(LiveJobError) as err:
        loop.run()
    assert "workers ['w2'] did not report 'idle:' within 2 s (the restart's start" in str(err.value)
    assert len(loop.series) == 5 and engine.down  # the job was stopped for the rescale when it ended


def test_rows_go_on_while_a_rescale_blocks_and_the_decisions_due_meanwhile_are_skipped() -> None:
    engine, _ = engine_on(World(), downtime=12.0)
    policy = Scripted({5.0: 3})
    loop = loop_on(engine, policy, 40)
    loop.run()
    times = [s.t for s in policy.seen]
    assert times[0] == 5.0 and times[1] == 17.0 and times[2:4] == [22.0, 27.0], times  # 10 and 15 fell due in it
    led = loop.ledger
    assert led.rescales["from_n"] == [2] and led.rescales["to_n"] == [3]
    assert led.rescales["downtime_s"][0] == pytest.approx(12.0, abs=0.5) and led.rescales["replayed"] == [0]
    s = loop.series
    assert list(s.running[5:17]) == [0] * 12 and s.running[18] == 3  # the rows of the restart: down
    assert led.rescales["recovered_s"][0] == pytest.approx(13.0, abs=1.0)  # the lag is back once it runs
    assert policy.seen[1].ready["w2"] and not policy.seen[0].ready.get("w2", False)
