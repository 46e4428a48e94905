"""Job mode's control loop, one for every engine: each run second it measures the job, looks for
what went wrong (a fault that ends the run, lost workers, a change past its bound), records the
second, settles the change under way and, every decision interval, turns the window into the
policy's input, asks the policy and rescales. Clock and sleep come from outside, so a fake clock
and a fake engine drive it in unit tests."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, cast

import numpy as np

from testbed.job.engine import Clock, JobEngine, Loss, Second, VertexEngine
from testbed.job.inputs import job_snapshot
from testbed.job.ledger import Change, JobLedger, Recovery
from testbed.job.series import JobSeries
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JobSnapshot
from testbed.policies.scaling import job_rescale, vertex_rescale


@dataclass(frozen=True)
class LoopSettings:
    duration: int  # run seconds
    top: int  # max scale-out
    window_s: int  # the policy's window
    checkpoint_s: float
    max_recoveries: int = 0  # lost workers replaced at most this often; one more ends the run
    recoveries_key: str = "max_recoveries"  # the setting that says so (for the reason)
    noun: str = "worker"  # what a worker is called in records and reasons
    # a rescale's recovery is tracked while another change is under way (a model whose old workers
    # keep processing while new ones start); a measuring engine waits until its change has settled
    track_during_change: bool = False
    # an engine whose changes block while its rows go on (a restart that returns once the job runs
    # again): the decisions that fell due meanwhile are skipped, the next is taken on the latest row
    skip_missed_decisions: bool = False
    # the engine sets each vertex's parallelism (a VertexEngine) and the policy decides per vertex
    # (`decide_vertices`); the workers are then the slots the largest vertex needs
    per_vertex: bool = False


def _quiet(message: str) -> None:
    """The default `say`: a run reports nothing."""


class JobLoop:
    def __init__(self, engine: JobEngine, policy: Policy, settings: LoopSettings, clock: Clock,
                 ledger: Optional[JobLedger] = None, series: Optional[JobSeries] = None,
                 say: Callable[[str], None] = _quiet) -> None:
        self.engine, self.policy, self.settings, self.clock = engine, policy, settings, clock
        self.ledger = ledger if ledger is not None else JobLedger()
        self.series = series if series is not None else JobSeries(settings.top, settings.duration)
        self.say = say
        self.t0 = clock.now()
        self.fault: Optional[str] = None  # why the run could not go on (it ends early)
        interval = policy.interval_s
        self.interval = float(interval) if interval else None
        self.next_decision = self.interval if self.interval else math.inf

    def now(self) -> float:
        """Run time: seconds since the job first ran."""
        return self.clock.now() - self.t0

    def start(self, n: int) -> None:
        """Deploys the job at n workers; the run's clock starts once it runs."""
        self.engine.start(n)
        self.t0 = self.clock.now()

    def run(self) -> None:
        """Every run second until the duration or a fault."""
        for k in range(self.settings.duration):
            self.step(k)
            if self.fault is not None:
                return

    def step(self, k: int) -> None:
        """Run second k: wait for its end, measure, handle faults, record, settle, decide."""
        delay = self.t0 + (k + 1) - self.clock.now()
        if delay > 0:
            self.clock.sleep(delay)
        self.engine.observe(k)
        t = float(k + 1)
        self.check_faults(t)
        if self.fault is not None:
            return
        second = self.engine.measure(k)
        self.series.append(second if second is not None else self._gap(t))
        self._track(t)
        if t >= self.next_decision - 1e-9 and t < self.settings.duration:
            assert self.interval  # next_decision is finite only with an interval
            self.next_decision += self.interval
            self._decide(k)

    def _gap(self, t: float) -> Second:
        """A second without a measurement: nothing counted, the lag as it was, no CPU reading."""
        self.ledger.gaps.append(t)
        s, top = self.series, self.settings.top
        last_lag = float(s.lag[-1]) if len(s) else 0.0
        running = int(s.running[-1]) if len(s) else 0
        return Second(arrivals=0.0, thr=np.zeros(top), cpu=np.full(top, np.nan), lag=last_lag, uptime=0.0,
                      parallel=self.engine.parallelism(), running=running)

    # -- faults --------------------------------------------------------------------------------
    def check_faults(self, t: float) -> None:
        """What went wrong since the last measurement (`t`: its row's time): a fault that ends the
        run, lost workers (replaced), a change past its bound (given up)."""
        now = self.now()
        fatal = self.engine.fatal(now)
        if fatal is not None:
            self.fault = fatal
            return
        losses = self.engine.losses(now)
        p = self.ledger.pending
        if p is not None and now >= p.deadline:
            losses += self._give_up(p, now, [loss.worker for loss in losses])
        for loss in losses:
            self._replace(loss, t, now)
            if self.fault is not None:
                return

    def _give_up(self, p: Change, now: float, lost: List[str]) -> List[Loss]:
        """The change under way took longer than its bound: it is given up (the controller decides
        again) and workers that never came up are replaced."""
        reason = (f"the job did not run at {p.target} {self.settings.noun}(s) within {p.deadline - p.began:.0f} s "
                  f"of t={p.began:.0f} s ({self.engine.state()})")
        self.say(f"given up at t={now:.0f} s: {reason}")
        self.ledger.given_up.append({"t_s": round(now, 1), "rescale": p.rescale, "reason": reason})
        self.ledger.pending = None
        return self.engine.stuck(now, lost)

    def _replace(self, loss: Loss, t: float, now: float) -> None:
        """A lost worker goes and a new one starts in its place (`t`: the row time, `now`: the run time)."""
        led, s, name = self.ledger, self.settings, loss.worker
        if len(led.recoveries) >= s.max_recoveries:
            self.fault = (f"{s.noun} {name} lost at t={now:.0f} s ({loss.why}), with {len(led.recoveries)} "
                          f"replaced already ({s.recoveries_key} = {s.max_recoveries})")
            return
        new = self.engine.replace(loss, now)
        self._skip_missed()
        led.recoveries.append(Recovery(round(now, 1), name, loss.why, new))
        self.say(f"{s.noun} {name} lost at t={now:.1f} s ({loss.why}): replaced by {new}")
        led.record(t, "replace", f"{s.noun} {name} lost at t={now:.1f} s: {loss.why}; replaced by {new}, the "
                                 f"job restarts from its last checkpoint", instance=name)
        bound = self.engine.change_bound_s()
        p = led.pending
        if p is None:
            p = led.pending = led.last_change = Change(self.engine.parallelism(), t, now, now + bound, led.replayed)
        p.recoveries.append(len(led.recoveries) - 1)
        p.starts = True
        p.deadline = max(p.deadline, now + bound)

    # -- a change and its recovery ---------------------------------------------------------------
    def _track(self, t: float) -> None:
        """Ends a change once the job runs at its target; then waits for a rescale's lag to recover."""
        self.settle(t)
        s = self.series
        if (self.ledger.pending is None or self.settings.track_during_change) and s.running[-1] > 0:
            self.ledger.track_recovery(t, float(s.lag[-1]), float(s.arrivals[-1]))

    def settle(self, t: Optional[float]) -> None:
        """Ends the change under way once the job runs at its target: a measured downtime (in row
        time `t`, or, after the run (`t` None), on the clock) and each replacement's downtime."""
        led, p = self.ledger, self.ledger.pending
        if p is None or not self.engine.settled(p.target):
            return
        now = self.now()
        if p.rescale is not None:
            if math.isnan(led.rescales["downtime_s"][p.rescale]):
                led.rescales["downtime_s"][p.rescale] = t - p.t_s if t is not None else round(now - p.began, 1)
            led.recovering = p.rescale if t is not None else None
        for r in p.recoveries:
            led.recoveries[r].downtime_s = round(now - led.recoveries[r].t_s, 1)
        self.engine.settle(p, now, t)
        led.pending = None

    # -- deciding ----------------------------------------------------------------------------------
    def _decide(self, k: int) -> None:
        s, engine = self.settings, self.engine
        n = engine.parallelism()
        snap = job_snapshot(self.series, k, n, s.top, s.checkpoint_s, s.window_s, engine.ready(float(k + 1)))
        if s.per_vertex:
            self._decide_vertices(k, snap)
            return
        rescale = job_rescale(n, self.policy.decide_job(snap), s.top)
        if rescale is None or self.ledger.pending is not None:
            return  # no change, or the job is still changing
        target, actions = rescale
        self.ledger.decision(float(k + 1), actions)
        self._begin(k, target, engine.rescale(k, target), target > n)

    def _decide_vertices(self, k: int, snap: JobSnapshot) -> None:
        """Per-vertex mode: the policy's target per vertex, set on the engine as one change whose
        workers are the slots of the largest vertex."""
        engine = cast(VertexEngine, self.engine)
        vertices = engine.vertex_snapshot(k, snap)
        change = vertex_rescale(vertices.parallelism(), self.policy.decide_vertices(vertices), self.settings.top,
                                engine.scalable())
        if change is None or self.ledger.pending is not None:
            return
        targets, actions = change
        self.ledger.decision(float(k + 1), actions)
        n = engine.parallelism()
        self._begin(k, max(targets.values()), engine.rescale_vertices(k, targets), max(targets.values()) > n)

    def _begin(self, k: int, target: int, row: Optional[int], starts: bool) -> None:
        """A change toward `target` workers is under way (`row`: its row of the rescales table)."""
        self._skip_missed()
        began = self.now()
        self.ledger.pending = self.ledger.last_change = Change(
            target, float(k + 1), began, began + self.engine.change_bound_s(), self.ledger.replayed, rescale=row,
            starts=starts)

    def _skip_missed(self) -> None:
        """After a change that blocked: the decisions due until now are not taken."""
        if self.settings.skip_missed_decisions and self.interval:
            self.next_decision = max(self.next_decision, float(math.floor(self.now())))
