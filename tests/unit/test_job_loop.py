"""The job loop (testbed/job/loop.py) against a fake clock and a fake engine: a rescale that never
completes is given up with a reason, a lost worker is found, replaced and recorded, a second without
a measurement is a gap, and decisions wait while a change is under way. Nothing sleeps: the fake
clock advances when the loop waits for the next second."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import numpy as np
import pytest

from testbed.job.engine import Loss, Second, StepClock
from testbed.job.inputs import job_snapshot
from testbed.job.ledger import Change, JobLedger
from testbed.job.loop import JobLoop, LoopSettings
from testbed.job.series import JobSeries
from testbed.model import ScaleTo
from testbed.policies.contract import Policy
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot

TOP = 4


class Scripted(Policy):
    """Asks for the parallelism `plan` gives at a decision's time (nothing otherwise); keeps what it saw."""

    name = "scripted"
    interval_s = 5.0

    def __init__(self, plan: Optional[Dict[float, int]] = None) -> None:
        self.plan = plan or {}
        self.seen: List[JobSnapshot] = []

    def decide_job(self, snapshot: JobSnapshot) -> list:
        self.seen.append(snapshot)
        n = self.plan.get(snapshot.t)
        return [ScaleTo(JOB_OPERATOR, n, "scripted")] if n else []


@dataclass
class FakeEngine:
    """n workers at 10 items/s each; a change is done `settle_s` after it began, unless a worker it
    starts hangs; losses and gaps come at the seconds given."""

    clock: StepClock
    settle_s: float = 3.0
    hangs: bool = False
    lose_at: Dict[int, str] = field(default_factory=dict)  # second -> worker lost
    gaps: Set[int] = field(default_factory=set)  # seconds without a measurement
    n: int = 0
    names: List[str] = field(default_factory=list)
    changed_at: float = -math.inf
    stuck_workers: Set[str] = field(default_factory=set)
    replaced: List[Tuple[str, str]] = field(default_factory=list)
    started: int = 0
    k: int = -1

    def _new(self) -> str:
        self.started += 1
        return f"x{self.started}"

    def start(self, n: int) -> None:
        self.n, self.names = n, [self._new() for _ in range(n)]

    def observe(self, k: int) -> None:
        self.k = k

    def measure(self, k: int) -> Optional[Second]:
        if k in self.gaps:
            return None
        up = self.settled(self.n)
        thr = np.zeros(TOP)
        thr[:self.n] = 10.0 if up else 0.0
        cpu = np.full(TOP, np.nan)
        cpu[:self.n] = 0.5 if up else 0.0
        return Second(arrivals=20.0, thr=thr, cpu=cpu, lag=float(k), uptime=1.0 if up else 0.0,
                      parallel=self.n, running=self.n if up else 0)

    def parallelism(self) -> int:
        return self.n

    def ready(self, t: float) -> Dict[str, bool]:
        return {f"w{w}": self.settled(self.n) for w in range(self.n)}

    def rescale(self, k: int, target: int) -> Optional[int]:
        for _ in range(self.n, target):
            name = self._new()
            self.names.append(name)
            if self.hangs:
                self.stuck_workers.add(name)
        del self.names[target:]
        self.n, self.changed_at = target, self.clock.now()
        return None

    def settled(self, target: int) -> bool:
        return (self.n == target and not (self.stuck_workers & set(self.names))
                and self.clock.now() - self.changed_at >= self.settle_s)

    def settle(self, change: Change, now: float, t: Optional[float]) -> None:
        pass

    def fatal(self, now: float) -> Optional[str]:
        return None

    def losses(self, now: float) -> List[Loss]:
        lost = self.lose_at.pop(self.k, None)
        return [Loss(lost, "its process exited (killed by SIGKILL)", kill=False)] if lost else []

    def replace(self, loss: Loss, now: float) -> str:
        new = self._new()
        self.names[self.names.index(loss.worker)] = new
        self.replaced.append((loss.worker, new))
        self.changed_at = self.clock.now()
        return new

    def stuck(self, now: float, lost: List[str]) -> List[Loss]:
        return [Loss(name, "never came up", kill=True) for name in self.names if name in self.stuck_workers]

    def state(self) -> str:
        return f"{len(self.names)} worker(s), {len(self.stuck_workers)} stuck"

    def change_bound_s(self) -> float:
        return 10.0

    def stop(self) -> None:
        pass


def run_loop(engine: FakeEngine, policy: Policy, duration: int = 40, max_recoveries: int = 3) -> JobLoop:
    settings = LoopSettings(duration=duration, top=TOP, window_s=10, checkpoint_s=2.0,
                            max_recoveries=max_recoveries)
    loop = JobLoop(engine, policy, settings, engine.clock)
    loop.start(2)
    loop.run()
    return loop


def test_the_loop_waits_on_its_clock_and_records_every_second() -> None:
    clock = StepClock(100.0)
    loop = run_loop(FakeEngine(clock), Scripted(), duration=12)
    assert len(loop.series) == 12 and clock.now() == pytest.approx(112.0)  # one second per row, no wall time
    assert list(loop.series.parallel) == [2] * 12 and not loop.ledger.records


def test_a_rescale_is_recorded_and_decisions_wait_until_it_is_done() -> None:
    policy = Scripted({5.0: 3, 10.0: 1, 15.0: 1})
    engine = FakeEngine(StepClock(), settle_s=8.0)
    loop = run_loop(engine, policy, duration=20)
    kinds = [(r.t_s, r.action) for r in loop.ledger.records]
    assert kinds == [(5.0, "scale_up"), (15.0, "scale_down"), (15.0, "scale_down")]  # t=10 came mid-change
    assert [s.parallelism for s in policy.seen] == [2, 3, 3]
    assert not policy.seen[1].ready["w2"] and policy.seen[2].ready["w2"]


def test_a_rescale_that_never_completes_is_given_up_with_a_reason_and_its_stuck_worker_replaced() -> None:
    engine = FakeEngine(StepClock(), hangs=True)
    loop = run_loop(engine, Scripted({5.0: 3}), duration=30)
    [given_up] = loop.ledger.given_up
    assert given_up["t_s"] == pytest.approx(15.0)  # began at 5 s, bound 10 s
    assert "did not run at 3 worker(s) within 10 s of t=5 s (3 worker(s), 1 stuck)" in given_up["reason"]
    [rec] = loop.ledger.recoveries
    assert (rec.worker, rec.why, rec.replaced_by) == ("x3", "never came up", "x4")
    assert rec.downtime_s == pytest.approx(3.0)  # the replacement's change settled after settle_s
    assert loop.ledger.pending is None and loop.fault is None
    assert [r.action for r in loop.ledger.records] == ["scale_up", "replace"]


def test_a_lost_worker_is_found_replaced_and_recorded() -> None:
    engine = FakeEngine(StepClock(), lose_at={7: "x1"})
    loop = run_loop(engine, Scripted(), duration=20)
    assert engine.replaced == [("x1", "x3")]
    [rec] = loop.ledger.recoveries
    assert (rec.t_s, rec.worker, rec.replaced_by) == (8.0, "x1", "x3") and "SIGKILL" in rec.why
    assert rec.downtime_s == pytest.approx(3.0)
    [replace] = loop.ledger.records
    assert (replace.t_s, replace.action, replace.instance) == (8.0, "replace", "x1")
    assert "replaced by x3" in replace.reason
    assert list(loop.series.running[6:11]) == [2, 0, 0, 0, 2]  # down from the second it was found


def test_losses_past_the_budget_end_the_run_with_a_reason() -> None:
    engine = FakeEngine(StepClock(), lose_at={3: "x1", 9: "x2"})
    loop = run_loop(engine, Scripted(), duration=20, max_recoveries=1)
    assert loop.fault is not None and "worker x2 lost at t=10 s" in loop.fault
    assert "max_recoveries = 1" in loop.fault and len(loop.series) == 9  # the run ends at once


def test_a_measurement_gap_is_recorded_and_the_policy_sees_it() -> None:
    policy = Scripted()
    engine = FakeEngine(StepClock(), gaps={4})
    loop = run_loop(engine, policy, duration=12)
    assert loop.ledger.gaps == [5.0]
    s = loop.series
    assert s.lag[4] == s.lag[3] and s.arrivals[4] == 0.0 and np.isnan(s.cpu[4]).all()
    assert s.parallel[4] == 2 and s.running[4] == 2
    [first, _] = policy.seen
    assert np.isnan(first.cpu["w0"][4]) and first.workload[4] == 0.0


def test_the_snapshot_is_the_window_of_the_series() -> None:
    series = JobSeries(TOP, capacity=2)  # grows past its first capacity
    for k in range(6):
        thr, cpu = np.full(TOP, float(k)), np.full(TOP, np.nan)
        cpu[:2] = 0.1 * k
        series.append(Second(arrivals=float(10 + k), thr=thr, cpu=cpu, lag=float(k), uptime=float(k + 1),
                             parallel=2, running=2))
    snap = job_snapshot(series, 5, 2, TOP, 2.0, 4, {"w1": False})
    assert snap.t == 6.0 and snap.lag == 5.0 and list(snap.seconds) == [3.0, 4.0, 5.0, 6.0]
    assert list(snap.workload) == [12.0, 13.0, 14.0, 15.0] and list(snap.throughput["w1"]) == [2.0, 3.0, 4.0, 5.0]
    assert snap.ready == {"w0": True, "w1": False} and set(snap.cpu) == {"w0", "w1"}
    snap.workload[0] = -1.0  # a copy: the series keeps its rows
    assert series.arrivals[2] == 12.0


def test_a_ledger_rescale_recovers_once_the_lag_is_back() -> None:
    ledger = JobLedger()
    row = ledger.open_rescale(10.0, 2, 3, lag_before=50.0, capacity_before=20.0, capacity_after=30.0)
    ledger.recovering = row
    ledger.track_recovery(14.0, 80.0, 10.0)
    assert math.isnan(ledger.rescales["recovered_s"][row])
    ledger.track_recovery(17.0, 40.0, 10.0)
    assert ledger.rescales["recovered_s"][row] == 7.0 and ledger.recovering is None
