"""A DABS-Storm-like baseline (Kombi et al., TLDKS 2019, as PRESPS compares with it;
docs/papers/presps.md#the-dabs-like-baseline).

DABS-Storm has no public code and its parameters are not published. What PRESPS's comparison turns
on is its reconfiguration mechanism, so this baseline takes its replica targets from the same
estimator as PRESPS (testbed/policies/presps.py) and differs only in how a change is carried out:

* any change of any operator's count restarts the topology: a `Restart` with downtime `downtime_s`
  (10 s) during which nothing is processed, every operator queue purged and its items counted as
  dropped (the event log's reason `purge`), then the new counts;
* at most one restart per `min_restart_interval_s` (30 s): a change decided sooner is not carried
  out (the estimator's next decision sees the state again);
* what becomes of the arrivals during the downtime is `source`: `hold` (the default) keeps them at
  the source and lets them enter the topology when it is back (their latency and timeout start then,
  as behind a spout that does not emit while the topology is down; live, the provider holds what it
  would publish); `queue` lets them wait in the entry queue with their emission time (the live
  provider keeps publishing); `drop` drops them, the spec's alternative (reason `source`); `pause`
  stops the source's trace clock for the downtime, so the trace resumes where it stopped, later
  (what the PRESPS authors' Storm spout does): nothing accumulates, nothing is lost, and the part of
  the trace that would come after the run's end is not emitted;
* `purge_entry=false` keeps the entry queues (those the sources feed) at a purge: the spec's choice
  for the live testbed, where the entry queue on the broker is also the source's buffer; the
  simulator's default purges every operator queue, the entry operator's included.

State is explicit (the estimator's fields and the last restart time); no clock, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from testbed.model import Action, Restart, Snapshot, check_source_mode
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.policies.presps import (EPS, PrespsEstimator, PrespsParams, active_counts, apply_targets, counts,
                                     plan_changes, pool_setup)
from testbed.policies.registry import register_policy


@dataclass
class DabsParams(PrespsParams):
    downtime_s: float = 10.0  # D_r: nothing is processed for this long after a restart
    purge: bool = True  # the restart drops everything queued
    min_restart_interval_s: float = 30.0  # at most one restart per this time
    source: str = "hold"  # the arrivals during the downtime: hold, queue, drop or pause (testbed.model.Restart)
    purge_entry: bool = True  # the purge empties the entry queues too (false keeps them: the spec's live default)

    def validate(self) -> None:
        super().validate()
        if self.downtime_s < 0:
            raise ValueError(f"downtime_s: must be >= 0, got {self.downtime_s}")
        if self.min_restart_interval_s < 0:
            raise ValueError(f"min_restart_interval_s: must be >= 0, got {self.min_restart_interval_s}")
        check_source_mode("source", self.source)


def restart_allowed(t: float, last_restart: Optional[float], min_interval_s: float) -> bool:
    return last_restart is None or t - last_restart >= min_interval_s - EPS


@register_policy("dabs", DabsParams, billing="rebill", placement="first_fit")
class DabsPolicy:
    name = "dabs"

    def __init__(self, params: DabsParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement or FirstFit()
        self.estimator = PrespsEstimator(params)
        self.started = False
        self.last_restart: Optional[float] = None

    def decide(self, snapshot: Snapshot) -> List[Action]:
        p = self.params
        actions: List[Action] = []
        if not self.started:
            self.started = True
            if p.mode == "pool":
                actions += pool_setup(snapshot, p, self.placement)
        self.estimator.observe(snapshot)
        if not self.estimator.due(snapshot.t):
            return actions
        est = self.estimator.estimate(snapshot)
        targets = {o: e.target for o, e in est.items()}
        current = active_counts(snapshot) if p.mode == "pool" else counts(snapshot)
        changes = plan_changes(targets, current)
        if not changes or not restart_allowed(snapshot.t, self.last_restart, p.min_restart_interval_s):
            return actions
        self.last_restart = snapshot.t
        what = ", ".join(f"{o} {current[o]}->{targets[o]}" for o in changes)
        actions.append(Restart(p.downtime_s, p.purge, f"DABS-like restart: {what}", source=p.source,
                               purge_entry=p.purge_entry))
        reasons = {o: "DABS-like " + e.reason(p.td_s).removeprefix("PRESPS ") for o, e in est.items()}
        return actions + apply_targets(snapshot, targets, reasons, p.mode, self.placement)
