"""DS2 (Kalavri et al., "Three steps is all you need", OSDI 2018) as a policy (docs/ds2.md); the
model is testbed/policies/ds2_core.py.

Every `policy_interval_s` DS2 reads the last observation window and computes every operator's
optimal parallelism at once. A rescale is followed by `warm_up_s` in which no decision is taken
(the new deployment's rates are not yet representative; in job mode counted from when the job runs
again after its restart), and a rescale needs `activation`
evaluations since the previous one. The paper's claim of converging in at most three steps is a
property of the model (exact when rates scale linearly with instances), not a mechanism.

Useful time. The testbed measures, per instance and monitoring interval, the items processed and
the busy fraction (busy time over the interval and the instance's item slots). Busy time counts
from an item's start of service to its end, so useful time = busy fraction x interval: the time the
instance's slots were serving, excluding waiting for input. What the instrumentation does not see:
time blocked on output (the simulator has no back-pressure; its queues are unbounded) and the
serialisation split; a busy item slot counts fully even if its work is I/O.

Operator mode: one decision for all operator types per interval, each realised as
ScaleTo(operator, n) (new instances placed, the newest stopped). The sources' target rates are
the items the sources sent along each edge in the window (the testbed's sources are external
traces, so the observed emission is the offered load, as the paper's external source rates are).

Job mode: the job is one vertex (JOB_OPERATOR) whose workers each run the whole keyed pipeline, fed
by the source's arrivals: DS2 degenerates to pi = ceil(arrival rate / (true rate per worker)), the
true rate per worker being the items all workers processed over their busy CPU-seconds, divided by
the workers measured. There is nothing to combine: with one parallelism for the whole job, the
per-operator results of the paper collapse into the one vertex, whose rate is the pipeline's (the
slowest stage's share of each worker's CPU is inside the worker's busy time).

Per-vertex mode (an engine that sets each vertex's parallelism: Flink's adaptive scheduler): the
paper's model as in operator mode, over the job's vertices: each subtask's records in over its useful
seconds (counters of the subtask read together, not a trailing busy gauge), each vertex's records
out over its records in along its one outgoing edge, the source at its arrivals over the window's
real seconds; every scalable vertex gets its own parallelism. The window holds only rows the current
deployment ran through, so that no instance of the previous one, nor the restart, is measured."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from testbed.model import Action, ReleaseHost, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy, time_field
from testbed.policies.ds2_core import Edge, Estimate, InstanceWindow, VertexWindow, optimal_parallelism
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot, VertexSeries, VertexSnapshot
from testbed.policies.registry import register_policy
from testbed.policies.scaling import realise, target_of

SOURCE = "source"  # job mode: the name of the job's one source


@dataclass
class Ds2Params:
    # The authors' controller configuration (github strymon-system/ds2, controller/config/ds2.toml):
    # a 10 s policy interval, two intervals of warm-up after a rescale, activation after one
    # evaluation, no over-provisioning; the paper sets no parallelism limit (0: none but the platform's).
    policy_interval_s: float = time_field(10.0)
    warm_up_s: float = time_field(20.0)
    activation: int = 1
    over_provision: float = 0.0  # the authors' scaling factor: factor x 100 % more instances than optimal
    min_parallelism: int = 1
    max_parallelism: int = 0

    def validate(self) -> None:
        if not self.policy_interval_s > 0:
            raise ValueError(f"policy_interval_s: must be > 0, got {self.policy_interval_s}")
        if self.warm_up_s < 0:
            raise ValueError(f"warm_up_s: must be >= 0, got {self.warm_up_s}")
        if self.activation < 1:
            raise ValueError(f"activation: must be >= 1, got {self.activation}")
        if self.over_provision < 0:
            raise ValueError(f"over_provision: must be >= 0, got {self.over_provision}")
        if self.min_parallelism < 1:
            raise ValueError(f"min_parallelism: must be >= 1, got {self.min_parallelism}")
        if self.max_parallelism and self.max_parallelism < self.min_parallelism:
            raise ValueError(f"max_parallelism: must be 0 (none) or >= min_parallelism "
                             f"({self.min_parallelism}), got {self.max_parallelism}")


@dataclass
class Ds2State:
    last_evaluation: float = -math.inf
    last_rescale: float = 0.0  # the initial deployment warms up like a rescaled one
    evaluations: int = 0  # since the last rescale


@register_policy("ds2", Ds2Params, billing="rebill", placement="first_fit")
class Ds2Policy(Policy):
    name = "ds2"

    def __init__(self, params: Ds2Params, placement: Optional[Placement] = None):
        params.validate()
        self.params = params
        self.placement = placement
        self.interval_s = params.policy_interval_s
        self.state = Ds2State()

    def due(self, t: float, running_s: float = math.inf) -> bool:
        """Whether DS2 acts at t: an interval since the last evaluation, out of warm-up, and (the
        evaluation then counted) `activation` evaluations since the last rescale. `running_s` is how
        long the deployment has run (job mode: the job's uptime, 0 while it restarts): warm-up counts
        from the later of the rescale and the deployment's start, as the new deployment's rates are
        representative only once it runs."""
        p, st = self.params, self.state
        if t - st.last_evaluation < p.policy_interval_s - 1e-9:
            return False
        if min(t - st.last_rescale, running_s) < p.warm_up_s - 1e-9:
            return False
        st.last_evaluation = t
        st.evaluations += 1
        return st.evaluations >= p.activation

    def estimate(self, vertices: List[VertexWindow], edges: Sequence[Edge],
                 sources: Mapping[Edge, float]) -> Dict[str, Estimate]:
        p = self.params
        return optimal_parallelism(vertices, edges, sources, p.over_provision, (p.min_parallelism, p.max_parallelism))

    def rescaled(self, t: float) -> None:
        self.state.last_rescale, self.state.evaluations = t, 0

    def decide(self, snapshot: Snapshot) -> List[Action]:
        if not self.due(snapshot.t):
            return []
        estimates = self.estimate(operator_windows(snapshot), list(snapshot.edges), source_rates(snapshot))
        plan, actions = Plan(snapshot), []
        placement = self.placement or FirstFit()
        for o, view in snapshot.operators.items():
            e = estimates[o]
            target = target_of(o, view.n, e.n, reason(e))
            if target is not None:
                actions += realise(plan, target, placement)
        if actions:
            self.rescaled(snapshot.t)
        return actions + [ReleaseHost(h, "no instance left on the host") for h in plan.empty_hosts()]

    def decide_job(self, s: JobSnapshot) -> List[Action]:
        if not self.due(s.t, float(s.uptime[-1]) if len(s.uptime) else 0.0):
            return []
        window, rate = job_window(s, self.params.policy_interval_s)
        e = self.estimate([window], [(SOURCE, JOB_OPERATOR)], {(SOURCE, JOB_OPERATOR): rate})[JOB_OPERATOR]
        n = None if e.n is None else min(e.n, s.max_scaleout)
        target = target_of(JOB_OPERATOR, s.parallelism, n, reason(e))
        if target is None:
            return []
        self.rescaled(s.t)
        return [target]


    def decide_vertices(self, s: VertexSnapshot) -> List[Action]:
        job = s.job
        # the loop samples once a second, so no decision interval is shorter than a second of real time
        rows = deployment_rows(job.uptime, s.spans, max(self.params.policy_interval_s, 1.0))
        if not rows or not self.due(job.t, float(job.uptime[-1])):
            return []
        source = s.vertices[0].name
        downstream = {u: d for u, d in s.edges}
        windows = [vertex_window(v, rows, float(s.spans[-rows:].sum()), downstream.get(v.name))
                   for v in s.vertices[1:]]
        rate = float(np.asarray(job.workload[-rows:], dtype=float).sum() / s.spans[-rows:].sum())
        estimates = self.estimate(windows, list(s.edges), {e: rate for e in s.edges if e[0] == source})
        actions: List[Action] = []
        for v in s.vertices:
            e = estimates.get(v.name)
            if not v.scalable or e is None:
                continue
            target = target_of(v.name, v.parallelism, None if e.n is None else min(e.n, job.max_scaleout), reason(e))
            if target is not None:
                actions.append(target)
        if actions:
            self.rescaled(job.t)
        return actions


def deployment_rows(uptime: np.ndarray, spans: np.ndarray, interval_s: float) -> int:
    """How many of the newest rows make the observation window: rows the current deployment ran
    through (it ran at both readings that bound the row; the row in which it started holds part of
    the restart), back from the newest until they cover `interval_s` of real time. 0: none yet."""
    n, covered = 0, 0.0
    for up, span in zip(uptime[::-1], spans[::-1], strict=True):
        if up < 2 or covered >= interval_s - 1e-9:
            break
        n, covered = n + 1, covered + float(span)
    return n


def vertex_window(v: VertexSeries, rows: int, window_s: float, downstream: Optional[str]) -> VertexWindow:
    """A vertex over its newest `rows` rows: per subtask slot that ran, the records it took in and its
    useful seconds (rows a slot did not run count for neither), and what it pushed downstream."""
    useful, records, out = v.useful[-rows:], v.records_in[-rows:], v.records_out[-rows:]
    instances, pushed = [], 0.0
    for j in range(useful.shape[1]):
        running = np.isfinite(useful[:, j])
        if running.any():
            instances.append(InstanceWindow(float(records[running, j].sum()), float(useful[running, j].sum())))
            pushed += float(out[running, j].sum())
    return VertexWindow(v.name, v.parallelism, tuple(instances), {downstream: pushed} if downstream else {}, window_s)


def operator_windows(snapshot: Snapshot) -> List[VertexWindow]:
    """Each operator's last monitoring interval, in topological order."""
    window = snapshot.monitoring_s
    owner = {i.id: i.operator for i in snapshot.instances}
    per_op: Dict[str, List[InstanceWindow]] = {o: [] for o in snapshot.operators}
    for iid, (processed, busy) in snapshot.instance_stats.items():
        o = owner.get(iid)
        if o in per_op:
            per_op[o].append(InstanceWindow(float(processed), busy * window))
    return [VertexWindow(o, view.n, tuple(per_op[o]),
                         {dst: float(items) for (src, dst), items in snapshot.edge_items.items() if src == o},
                         window)
            for o, view in snapshot.operators.items()]


def source_rates(snapshot: Snapshot) -> Dict[Edge, float]:
    """Items/s the sources sent along each of their edges over the last interval: DS2's targets."""
    return {e: snapshot.edge_items.get(e, 0) / snapshot.monitoring_s
            for e in snapshot.edges if e[0] not in snapshot.operators}


def job_window(s: JobSnapshot, interval_s: float) -> Tuple[VertexWindow, float]:
    """The job as one vertex over the last interval: per worker the items processed and its busy
    CPU-seconds (seconds it was not running count for neither), and the arrival rate."""
    k = max(1, int(round(interval_s)))
    instances = []
    for w, thr in s.throughput.items():
        cpu = np.asarray(s.cpu.get(w, np.full(len(thr), np.nan))[-k:], dtype=float)
        running = np.isfinite(cpu)
        instances.append(InstanceWindow(float(np.asarray(thr[-k:], dtype=float)[running].sum()),
                                        float(cpu[running].sum())))
    arrivals = np.asarray(s.workload[-k:], dtype=float)
    rate = float(arrivals.mean()) if arrivals.size else 0.0
    return VertexWindow(JOB_OPERATOR, s.parallelism, tuple(instances), {}, float(k)), rate


def reason(e: Estimate) -> str:
    if e.exact is None or e.rate_per_instance is None:
        return f"ds2: no measured instance of {e.name}"
    return (f"ds2: target input {e.target_input:.1f}/s over true rate {e.rate_per_instance:.1f}/s per instance "
            f"= {e.exact:.2f} -> {e.n} (was {e.current})")
