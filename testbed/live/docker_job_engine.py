"""The live job's worker containers as the job loop's engine (testbed/job/engine.py;
docs/papers/daedalus.md#live-runtime). Rows come from the sampler's thread, which goes on while a
restart blocks; a rescale, and the replacement of a worker whose container exited, is a
stop-the-world restart from the workers' checkpoints that returns once the job runs again:

pause the router; every worker stops at its checkpoint (the broker requeues what it held) and
drops its uncommitted state; rebind the worker queues for n'; move everything in the old queues
through the exchange again (dropping the ids a replaced worker's last checkpoint committed but did
not acknowledge); start the new workers, remove the gone ones; wait out the drawn downtime; go.

A worker that exits during a restart's stop or start is replaced within that restart, under the
recovery budget (`RestartExits`); one that exits once the job runs again is left to the loop."""
from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from operators.keyed_job import redis_key, worker_name
from testbed.job.engine import Clock, Loss, Second
from testbed.job.ledger import Change, JobLedger, Recovery
from testbed.job_config import JobConfig, LiveJobConfig
from testbed.live.job_faults import FaultWatch, LiveJobError
from testbed.live.job_routing import inflight_limit, parse_ids, rebinding
from testbed.live.job_sampler import JobState
from testbed.live.job_workers import Exit, PhaseWait, Workers, exit_message, exit_why

log = logging.getLogger(__name__)

ROW_POLL_S = 0.05


@dataclass
class Feed:
    """What runs while the job runs: the source, the router and the sampler (its `rows`)."""

    source: Any
    router: Any
    sampler: Any


@dataclass
class DockerParts:
    """The engine's parts: the containers, the broker topology (`bind`, `move`), Redis, the fault
    reasons, the clock; `launch(n, t0)` starts the source, router and sampler of a job of n."""

    workers: Workers
    broker: Any
    redis: Any
    faults: FaultWatch
    clock: Clock
    launch: Callable[[int, float], Feed]


@dataclass(frozen=True)
class Restarted:
    """A restart's figures."""

    downtime_s: float  # from its beginning until every worker runs again
    replayed: int  # items processed since the checkpoints, processed again after it
    moved: int  # items re-routed through the exchange
    duplicates_dropped: int  # items a replaced worker's checkpoint committed: removed, not processed again


class RestartExits:
    """Workers that exit during a restart's stop or start (killed, crashed): within the recovery
    budget each is replaced within that restart (one meant to go with a scale-in just goes) and
    recorded as a recovery; past it the run ends naming the first. `spent`: exits the restart
    itself replaces (a recovery's)."""

    def __init__(self, engine: "DockerJobEngine", spent: int, restart: str) -> None:
        self.engine, self.spent, self.restart = engine, spent, restart
        self.exits: List[Tuple[int, Recovery]] = []  # (worker index, its recovery, figures to come)

    def accept(self, exited: List[Exit], during: str) -> None:
        engine, t = self.engine, self.engine.now()
        budget = engine.settings.max_recoveries
        used = len(engine.ledger.recoveries) + self.spent + len(self.exits)
        if used + len(exited) > budget:
            raise LiveJobError(f"{exit_message(*exited[0])} during {during} of {self.restart} at t={t:.0f} s, "
                               f"with {used} worker(s) replaced already (backend.live.job.max_recoveries = {budget})")
        for w, wc, code in exited:
            engine.say(f"{exit_message(w, wc, code)} during {during} of {self.restart} at t={t:.0f} s: "
                       f"the restart replaces it")
            self.exits.append((w, Recovery(t, worker_name(w), exit_why(wc, code), "", details={
                "container": wc.container.name, "exit_code": code, "during": f"{during} of {self.restart}"})))
        engine.workers.remove([e[0] for e in exited], engine.now())

    def record(self, t_s: float, target: int, info: Restarted) -> None:
        """Once the restart is done: an action and a recovery per exit, with the restart's figures."""
        for w, rec in self.exits:
            replaced = w < target
            rec.replaced_by = self.engine.workers.name(w) if replaced else ""
            rec.downtime_s, rec.replayed = info.downtime_s, info.replayed
            rec.details.update(moved=info.moved, duplicates_dropped=info.duplicates_dropped)
            self.engine.ledger.record(
                t_s, "replace", f"worker {rec.worker} (container {rec.details['container']}) {rec.why} during "
                                f"{rec.details['during']} at t={rec.t_s:.0f} s: "
                + ("replaced within the restart" if replaced else "not replaced, the rescale removes it"),
                instance=rec.worker)
            self.engine.ledger.recoveries.append(rec)


class DockerJobEngine:
    STALL_S = 30.0  # no measurement for this long: the run ends
    DEAD_CHECK_S = 1.0  # how often the engine is asked for exited workers

    def __init__(self, parts: DockerParts, settings: LiveJobConfig, job: JobConfig, ledger: JobLedger,
                 capacity: Dict[int, float], rng_down: Any, say: Callable[[str], None]) -> None:
        self.workers, self.broker, self.redis = parts.workers, parts.broker, parts.redis
        self.faults, self.clock, self.launch = parts.faults, parts.clock, parts.launch
        self.settings, self.job, self.ledger, self.capacity = settings, job, ledger, capacity
        self.rng_down, self.say = rng_down, say
        self.wait = PhaseWait(self.workers, self.redis, self.clock, self.now, self.faults.check,
                              self.faults.diagnose_exit, self.faults.redis_lost)
        self.lock = threading.Lock()
        self.n = self.epoch = 0
        self.down = False
        self.up_since = 0.0
        self.ready_from: Dict[int, float] = {}
        self.rolled_back = 0  # processed - committed at the last stop-the-world
        self.t0: Optional[float] = None
        self.feed: Optional[Feed] = None
        self.k = -1  # the last second observed
        self.last_lag = 0.0
        self.next_check = 0.0
        self.found: Dict[str, Exit] = {}  # exited workers the loop was last told of, by name
        self.done: Set[str] = set()  # of them, those a restart replaced already
        # workers replaced, until their change settles: the restart's figures, what their container said
        self.replaced: Dict[str, Tuple[Restarted, Dict[str, Any]]] = {}

    def now(self) -> float:
        return 0.0 if self.t0 is None else self.clock.now() - self.t0

    def key(self, name: str) -> str:
        return redis_key(self.workers.prefix, name)

    def job_state(self) -> JobState:
        """For the sampler's rows (its thread)."""
        workers = self.workers.snapshot()
        with self.lock:
            return JobState(workers, self.n, self.down, self.up_since)

    # -- starting and measuring ----------------------------------------------------------------
    def start(self, n: int) -> None:
        """The initial workers started and bound, then the router, the source and the sampler: the
        run's clock starts."""
        self.redis.set(self.key("control"), "stop:0")
        self.faults.state_written = True  # from here on the control key is always there
        self.workers.start(range(n), 0.0)
        self.wait(range(n), "idle:", self.settings.start_timeout_s, "start")
        self.broker.bind(*rebinding(0, n))
        self.n, self.epoch = n, 1
        self.redis.set(self.key("control"), f"run:{self.epoch}")
        self.t0 = self.clock.now()
        self.feed = self.launch(n, self.t0)
        self.faults.parts = [(self.feed.source, "the source"), (self.feed.router, "the router")]

    def observe(self, k: int) -> None:
        """Waits for the sampler's row of second k (rows pile up while a restart blocks)."""
        assert self.feed is not None
        rows = self.feed.sampler.rows
        seen, seen_at = len(rows), self.clock.now()
        while len(rows) <= k:
            self.faults.check()
            if len(rows) != seen:
                seen, seen_at = len(rows), self.clock.now()
            elif self.clock.now() - seen_at > self.STALL_S:
                raise LiveJobError(f"the measurements stalled at t={self.now():.0f} s (no sample for "
                                   f"{self.STALL_S:.0f} s)")
            self.clock.sleep(ROW_POLL_S)
        self.k = k

    def measure(self, k: int) -> Optional[Second]:
        assert self.feed is not None
        row: Second = self.feed.sampler.rows[k]
        self.last_lag = row.lag
        if (k + 1) % 60 == 0:
            self.say(f"{k + 1} s, {self.n} worker(s), lag {row.lag:.0f}, {len(self.ledger.rescales['t_s'])} "
                     f"rescale(s)")
        return row

    def parallelism(self) -> int:
        return self.n

    def ready(self, t: float) -> Dict[str, bool]:
        return {worker_name(w): self.ready_from.get(w, 0.0) <= t for w in range(self.n)}

    # -- changing ------------------------------------------------------------------------------
    def rescale(self, k: int, target: int) -> Optional[int]:
        """The controller's rescale: a restart from the checkpoints with `target` workers and a drawn downtime."""
        old, t = self.n, float(k + 1)
        lo, hi = self.job.downtime_out_s if target > old else self.job.downtime_in_s
        drawn = float(self.rng_down.uniform(lo, hi))
        lag_before = self.last_lag
        info = self._restart(t, target, drawn_s=drawn)
        self.ledger.record(t, "restart", f"stop the world {old} -> {target} workers: downtime {info.downtime_s:.1f} s "
                                         f"(drawn {drawn:.1f} s), {info.replayed} item(s) processed since the "
                                         f"checkpoints replayed, {info.moved} item(s) re-routed")
        self.say(f"rescale {old} -> {target} at {t:.0f} s, downtime {info.downtime_s:.1f} s, {info.moved} item(s) "
                 f"re-routed")
        return self.ledger.open_rescale(t, old, target, float(lag_before), self.capacity.get(old, math.nan),
                                        self.capacity.get(target, math.nan), downtime_s=info.downtime_s,
                                        replayed=info.replayed)

    def settled(self, target: int) -> bool:
        """A restart returns once the job runs again: a change is over when the loop looks."""
        with self.lock:
            return self.n == target and not self.down

    def settle(self, change: Change, now: float, t: Optional[float]) -> None:
        """A replacement's figures are its restart's (measured within it), not the loop's."""
        for r in change.recoveries:
            rec = self.ledger.recoveries[r]
            replaced = self.replaced.pop(rec.worker, None)
            if replaced is not None:
                info, said = replaced
                rec.downtime_s, rec.replayed = info.downtime_s, info.replayed
                rec.details.update(said, moved=info.moved, duplicates_dropped=info.duplicates_dropped)

    def change_bound_s(self) -> float:
        """What a restart may take: each of its waits is bounded (it raises past them)."""
        s = self.settings
        return s.stop_timeout_s + 2 * s.start_timeout_s + max(*self.job.downtime_out_s, *self.job.downtime_in_s)

    # -- faults --------------------------------------------------------------------------------
    def fatal(self, now: float) -> Optional[str]:
        return self.faults.current()

    def losses(self, now: float) -> List[Loss]:
        """Workers whose container exited (asked every DEAD_CHECK_S): lost, unless a broker or Redis
        failure explains the exit (then the run ends with that reason)."""
        if self.clock.now() < self.next_check:
            return []
        self.next_check = self.clock.now() + self.DEAD_CHECK_S
        exited = self.workers.exited()
        if not exited:
            return []
        self.faults.diagnose_exit()
        self.done = set()
        self.found = {worker_name(w): (w, wc, code) for w, wc, code in exited}
        return [Loss(name, f"container {wc.container.name} {exit_why(wc, code)}", kill=False)
                for name, (_w, wc, code) in self.found.items()]

    def replace(self, loss: Loss, now: float) -> str:
        """The job restarts from its checkpoints at the same parallelism, as a Flink job restarts after
        a TaskManager failure, replacing every exited worker the budget allows at once (a lost
        worker replaced by an earlier restart of the same check is not restarted again)."""
        if loss.worker in self.done:
            return self.workers.name(self.found[loss.worker][0])
        budget = self.settings.max_recoveries - len(self.ledger.recoveries)
        batch = [loss.worker] + [name for name in self.found if name != loss.worker and name not in self.done]
        batch = batch[:max(1, budget)]
        self.say(f"{', '.join(batch)} exited at t={now:.0f} s: replacing, the job restarts from its checkpoints")
        info = self._restart(float(self.k + 1), self.n, replace=[self.found[name][0] for name in batch])
        for name in batch:
            _w, wc, code = self.found[name]
            self.replaced[name] = (info, {"container": wc.container.name, "exit_code": code})
        self.done |= set(batch)
        return self.workers.name(self.found[loss.worker][0])

    def stuck(self, now: float, lost: List[str]) -> List[Loss]:
        return []  # a restart that does not finish ends the run (its waits are bounded)

    def state(self) -> str:
        return f"{self.n} worker(s), {'in a restart' if self.down else 'running'}, epoch {self.epoch}"

    def stop(self) -> None:
        """The sampler, the source and the router stopped (the containers go with the run's cleanup)."""
        feed = self.feed
        if feed is None:
            return
        for stop in (lambda: feed.sampler.stop(5.0), feed.source.stop, feed.router.stop):
            try:
                stop()
            except Exception as exc:  # the rest is stopped all the same
                log.warning("stopping a part of %s: %s", self.workers.prefix, exc)

    # -- the restart ---------------------------------------------------------------------------
    def _restart(self, t: float, target: int, drawn_s: float = 0.0, replace: Sequence[int] = ()) -> Restarted:
        """Stop the world, rebind, move the queued items, change the workers, wait out the downtime, go.
        `replace`: workers whose containers exited (a recovery): their containers go and new ones
        start under the same names; the others stop at their checkpoints as in a rescale."""
        old = self.n
        exits = RestartExits(self, len(set(replace)), f"the restart {old} -> {target}")
        t_start = self.now()
        replace = self._stop_world(t, sorted(set(replace)), exits)
        replayed, moved, dropped = self._reroute(old, target, replace)
        starting = self._start_new(old, target, replace, exits)
        up = self._go(target, starting, t_start + drawn_s, moved)
        info = Restarted(up - t_start, replayed, moved, dropped)
        exits.record(t, target, info)
        return info

    def _stop_world(self, t: float, replace: List[int], exits: RestartExits) -> List[int]:
        """The router paused, the replaced workers gone, the others stopped at their checkpoints; a
        worker that exits meanwhile holds nothing more than a stopped one (the broker requeued what
        it held, its uncommitted state is dropped anyway): it is replaced as in a recovery."""
        assert self.feed is not None
        if not self.feed.router.pause(self.settings.stop_timeout_s):
            self.faults.check()
            raise LiveJobError(f"the router did not pause for the restart at t={t:.0f} s")
        with self.lock:
            self.down = True
        self.workers.remove(replace, self.now())
        self.redis.set(self.key("control"), f"stop:{self.epoch}")
        died = self.wait([w for w in range(self.n) if w not in replace], f"stopped:{self.epoch}",
                         self.settings.stop_timeout_s, "the stop-the-world", exits.accept)
        return sorted(set(replace) | set(died))

    def _reroute(self, old: int, target: int, replace: List[int]) -> Tuple[int, int, int]:
        """Processing since the last checkpoints is rolled back (replayed after the restart); the
        queues are rebound and their items moved. (replayed, moved, dropped)."""
        rolled_back = self.processed_total() - self.committed_total()
        replayed, self.rolled_back = rolled_back - self.rolled_back, rolled_back
        self.broker.bind(*rebinding(old, target))
        # a replaced worker may have died between its last commit and its ack: those items are back in
        # the queues, committed already; they go (the others are redelivered and processed again)
        drop: FrozenSet[int] = frozenset()
        if replace:
            for raw in self.redis.hmget(self.key("lastcommit"), [worker_name(w) for w in replace]):
                drop |= parse_ids(raw)
        moved, dropped = self.broker.move(old, drop)
        return int(replayed), moved, dropped

    def _start_new(self, old: int, target: int, replace: List[int], exits: RestartExits) -> List[int]:
        """The removed workers go and the new and replaced ones start; a new worker that exits before
        it is idle holds nothing: another one starts."""
        self.workers.remove(range(target, old), self.now())
        starting = sorted(set(range(old, target)) | {w for w in replace if w < target})
        pending = starting
        while pending:
            self.workers.start(pending, self.now())
            pending = self.wait(pending, "idle:", self.settings.start_timeout_s, "the restart's start", exits.accept)
        with self.lock:
            self.n = target
        for w in starting:
            self.ready_from[w] = math.inf
        return starting

    def _go(self, target: int, starting: List[int], not_before: float, moved: int) -> float:
        """After the drawn downtime the workers consume again and the router resumes; returns the run
        time the job runs again."""
        assert self.feed is not None
        rest = not_before - self.now()
        if rest > 0:
            self.clock.sleep(rest)
        self.epoch += 1
        self.redis.set(self.key("control"), f"run:{self.epoch}")
        # one that exits now may have processed already: the loop finds it as any other lost worker
        self.wait(range(target), f"running:{self.epoch}", self.settings.start_timeout_s, "the restart",
                  lambda _exited, _what: None)
        up = self.now()
        with self.lock:
            self.down = False
            self.up_since = math.ceil(up)
        for w in starting:
            self.ready_from[w] = up
        self.feed.router.resume(moved, inflight_limit(self.settings.inflight_s, self.settings.worker_rate, target))
        return up

    def processed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self.key("processed")))

    def committed_total(self) -> int:
        return sum(int(v) for v in self.redis.hvals(self.key("committed")))
