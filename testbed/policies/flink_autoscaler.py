"""The Apache Flink Kubernetes Operator's autoscaler (module flink-autoscaler) as a policy
(docs/flink-autoscaler.md); the decision per vertex is testbed/policies/flink_autoscaler_core.py.

Like upstream, the policy collects metrics once the job has run for the stabilisation interval
after its last rescale, decides once they span the metric window, averages them over that window,
and rescales every vertex it changes at once, then starts collecting afresh.

What the testbed measures in place of Flink's metrics:

* busy time: job mode, each worker's CPU fraction per second; operator mode, each instance's busy
  fraction of the monitoring interval (`instance_stats`), aggregated over the subtasks like
  `metrics.busy-time.aggregator` (MAX by default);
* records in: job mode the workers' throughput, operator mode the operator's processed items;
* a source's lag: job mode the consumer lag; operator mode a source operator's queue. Flink's
  downstream vertices have no lag of their own (bounded network buffers), the testbed's operators
  have broker queues: with `queue_catch_up` their own queue is caught up as well;
* a source's target rate: job mode the arrival rate (which is what upstream's records in plus the
  lag's growth add up to); operator mode the items the sources sent along its edges;
* key groups: job mode the job is keyed; operator mode a stateful operator is taken as keyed.

Per-vertex mode (Flink's adaptive scheduler, what upstream drives): the job's scalable vertices in
topological order, each with its subtasks' busy time and records in; the first takes the source's
arrivals and lag (the source itself, of parallelism 1, is not scaled), each later one its upstream's
records out; a keyed vertex is aligned to the key groups.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from testbed.model import Action, ReleaseHost, ScaleTo, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy, time_field
from testbed.policies.flink_autoscaler_core import (
    ALIGNMENT_MODES,
    BALANCED,
    Change,
    DelayedScaleDown,
    Evaluated,
    Settings,
    Summary,
    decide,
    expected_rate,
    joint,
)
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot, VertexSnapshot
from testbed.policies.registry import register_policy
from testbed.policies.scaling import realise

AGGREGATORS = ("MAX", "AVG", "MIN")


@dataclass
class FlinkAutoscalerParams:
    """AutoScalerOptions the testbed can honour, with upstream's defaults (job.autoscaler.*)."""

    metrics_window_s: float = time_field(900.0)  # metrics.window
    stabilization_s: float = time_field(300.0)  # stabilization.interval
    target_utilisation: float = 0.7  # utilization.target
    utilisation_boundary: float = 0.3  # target.utilization.boundary
    utilisation_max: Optional[float] = None  # utilization.max (None: target + boundary)
    utilisation_min: Optional[float] = None  # utilization.min (None: target - boundary)
    catch_up_s: float = time_field(1800.0)  # catch-up.duration
    restart_time_s: float = time_field(300.0)  # restart.time
    restart_time_tracking: bool = False  # restart.time-tracking.enabled (job mode measures the downtime)
    restart_time_tracking_limit_s: float = time_field(900.0)  # restart.time-tracking.limit
    backlog_lag_threshold_s: float = time_field(300.0)  # backlog-processing.lag-threshold
    max_scale_up_factor: float = 100000.0  # scale-up.max-factor
    max_scale_down_factor: float = 0.6  # scale-down.max-factor
    scale_down_interval_s: float = time_field(3600.0)  # scale-down.interval
    min_parallelism: int = 1  # vertex.min-parallelism
    max_parallelism: int = 200  # vertex.max-parallelism
    effectiveness_detection: bool = False  # scaling.effectiveness.detection.enabled
    effectiveness_threshold: float = 0.1  # scaling.effectiveness.threshold
    alignment: str = BALANCED  # scaling.parallelism-alignment.mode: BALANCED | EVENLY_SPREAD | OFF
    busy_time_aggregator: str = "MAX"  # metrics.busy-time.aggregator: MAX | AVG | MIN
    # Flink's default max parallelism (key groups) of a job below 86 subtasks
    key_groups: int = 128
    # Decision: job mode's control loop every 10 s (the standalone autoscaler's
    # control-loop.interval); operator mode decides every reasoning cycle
    interval_s: float = time_field(10.0)
    queue_catch_up: bool = True  # operator mode: a downstream operator's own queue is caught up too

    def validate(self) -> None:
        for key in ("metrics_window_s", "interval_s", "restart_time_tracking_limit_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        for key in ("stabilization_s", "catch_up_s", "restart_time_s", "backlog_lag_threshold_s",
                    "scale_down_interval_s", "max_scale_up_factor"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("target_utilisation", "utilisation_boundary", "effectiveness_threshold"):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{key}: must be in [0, 1], got {getattr(self, key)}")
        for key in ("utilisation_max", "utilisation_min"):
            if getattr(self, key) is not None and not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{key}: must be in [0, 1] or null, got {getattr(self, key)}")
        if not self.target_utilisation > 0:
            raise ValueError(f"target_utilisation: must be > 0, got {self.target_utilisation}")
        if not 0 <= self.max_scale_down_factor <= 1:
            raise ValueError(f"max_scale_down_factor: must be in [0, 1], got {self.max_scale_down_factor}")
        if self.min_parallelism < 1:
            raise ValueError(f"min_parallelism: must be >= 1, got {self.min_parallelism}")
        if self.max_parallelism < self.min_parallelism:
            raise ValueError(f"max_parallelism: must be >= min_parallelism ({self.min_parallelism}), "
                             f"got {self.max_parallelism}")
        if self.key_groups < 1:
            raise ValueError(f"key_groups: must be >= 1, got {self.key_groups}")
        if self.alignment not in ALIGNMENT_MODES:
            raise ValueError(f"alignment: must be one of {', '.join(ALIGNMENT_MODES)}, got {self.alignment!r}")
        if self.busy_time_aggregator not in AGGREGATORS:
            raise ValueError(f"busy_time_aggregator: must be one of {', '.join(AGGREGATORS)}, "
                             f"got {self.busy_time_aggregator!r}")

    def settings(self) -> Settings:
        return Settings(**{f.name: getattr(self, f.name) for f in fields(Settings)})


@dataclass(frozen=True)
class Sample:
    """One vertex over one collection step: rates in items/s, busy a fraction."""

    t: float
    records_in: float
    busy: float  # NaN: no reading
    arrivals: float  # from outside the topology (sources)
    edges: Tuple[Tuple[str, float], ...]  # (upstream operator, items/s sent to this vertex)
    lag: float


def aggregate(values: Sequence[float], how: str) -> float:
    """The subtasks' busy fractions as one (metrics.busy-time.aggregator); NaN without readings."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return math.nan
    return max(finite) if how == "MAX" else min(finite) if how == "MIN" else sum(finite) / len(finite)


def mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def true_rate(records_in: float, busy: float) -> float:
    """Records in over the busy fraction; nothing in: infinite (upstream assumes unbounded capacity
    until data flows)."""
    if math.isnan(busy):
        return math.nan
    if records_in == 0:
        return math.inf
    return records_in / busy if busy > 0 else math.inf


@dataclass(frozen=True)
class Rates:
    """A vertex's windowed averages."""

    records_in: float
    busy: float
    arrivals: float
    edges: Dict[str, float]
    lag: float  # the newest


def window_rates(samples: Sequence[Sample]) -> Rates:
    edges: Dict[str, List[float]] = {}
    for s in samples:
        for u, r in s.edges:
            edges.setdefault(u, []).append(r)
    n = len(samples)
    return Rates(records_in=sum(s.records_in for s in samples) / n, busy=mean([s.busy for s in samples]),
                 arrivals=sum(s.arrivals for s in samples) / n,
                 edges={u: sum(v) / n for u, v in edges.items()}, lag=samples[-1].lag)


def evaluate(order: Sequence[str], rates: Dict[str, Rates], parallelism: Dict[str, int], keyed: Dict[str, bool],
             p: FlinkAutoscalerParams) -> Dict[str, Evaluated]:
    """ScalingMetricEvaluator over the vertices in topological order: a source's target is its
    arrivals, a downstream vertex's its inputs' targets times each edge's output ratio."""
    backlog = any(is_backlogged(rates[v], p) for v in order if not rates[v].edges)
    out: Dict[str, Evaluated] = {}
    for v in order:
        r = rates[v]
        target, catch_up = r.arrivals, 0.0
        if not r.edges or p.queue_catch_up:
            catch_up = r.lag / p.catch_up_s if p.catch_up_s > 0 else 0.0
        for u, rate in r.edges.items():
            ratio = rate / rates[u].records_in if rates[u].records_in > 0 and u in out else 0.0
            if u in out:
                target += out[u].target_rate * ratio
                catch_up += out[u].catch_up_rate * ratio
        out[v] = Evaluated(parallelism[v], target, catch_up, true_rate(r.records_in, r.busy),
                           key_groups=p.key_groups, keyed=keyed[v], backlog=backlog)
    return out


def is_backlogged(r: Rates, p: FlinkAutoscalerParams) -> bool:
    """A source whose lag would take longer than the threshold at its current input rate."""
    return r.records_in > 0 and r.lag / r.records_in > p.backlog_lag_threshold_s


@register_policy("flink_autoscaler", FlinkAutoscalerParams, billing="rebill", placement="first_fit")
class FlinkAutoscalerPolicy(Policy):
    name = "flink_autoscaler"

    def __init__(self, params: FlinkAutoscalerParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement
        self.interval_s = params.interval_s
        self.settings = params.settings()
        self.samples: Dict[str, List[Sample]] = {}
        self.last: Dict[str, Summary] = {}
        self.delayed: Dict[str, DelayedScaleDown] = {}
        self.rescaled_at = 0.0
        self.seen_t = -math.inf
        self.restart_s: Optional[float] = None  # the downtime of the last rescale so far (job mode)
        self.restarts: List[float] = []  # the downtimes of the earlier rescales

    # -- collection ------------------------------------------------------------------------------

    def collect(self, v: str, sample: Sample) -> None:
        rows = self.samples.setdefault(v, [])
        rows.append(sample)
        while rows and rows[0].t <= sample.t - self.params.metrics_window_s:
            rows.pop(0)

    def window_full(self, now: float) -> bool:
        """The samples reach back a whole metric window (and there are some)."""
        rows = next(iter(self.samples.values()), [])
        return bool(rows) and now - rows[0].t >= self.params.metrics_window_s - self.span(rows)

    @staticmethod
    def span(rows: Sequence[Sample]) -> float:
        return rows[1].t - rows[0].t if len(rows) > 1 else 1.0

    def restart_time(self) -> float:
        p = self.params
        measured = self.restarts + ([self.restart_s] if self.restart_s is not None else [])
        if p.restart_time_tracking and measured:
            # the longest restart tracked, as upstream takes from its scaling records
            return min(max(measured), p.restart_time_tracking_limit_s)
        return p.restart_time_s

    # -- the decision ----------------------------------------------------------------------------

    def changes(self, now: float, order: Sequence[str], parallelism: Dict[str, int],
                keyed: Dict[str, bool], top: Optional[int] = None) -> Dict[str, Change]:
        """The vertices' new parallelisms, once the window is full; applied together or not at all.
        `top`: the most the backend gives (job mode's max scale-out), so the scaling remembered, and
        judged for effectiveness later, is the one carried out."""
        if not self.window_full(now):
            return {}
        rates = {v: window_rates(self.samples[v]) for v in order}
        evaluated = evaluate(order, rates, parallelism, keyed, self.params)
        restart = self.restart_time()
        proposed = {v: decide(self.settings, evaluated[v], restart, now, self.last.get(v), self.delayed, v)
                    for v in order}
        chosen = {v: within(c, top) for v, c in joint(proposed).items()}
        chosen = {v: c for v, c in chosen.items() if c.changed}
        if chosen:
            for v, c in chosen.items():
                e = evaluated[v]
                self.last[v] = Summary(c.current, c.new, e.true_rate, expected_rate(e, c.new))
            self.delayed.clear()
            self.samples.clear()
            self.rescaled_at = now
            if self.restart_s is not None:
                self.restarts.append(self.restart_s)
            self.restart_s = None
        return chosen

    # -- job mode --------------------------------------------------------------------------------

    def decide_job(self, s: JobSnapshot) -> List[Action]:
        self.collect_job(s)
        c = self.changes(s.t, [JOB_OPERATOR], {JOB_OPERATOR: s.parallelism}, {JOB_OPERATOR: True},
                         top=s.max_scaleout).get(JOB_OPERATOR)
        return [] if c is None else [ScaleTo(JOB_OPERATOR, c.new, reason(JOB_OPERATOR, c))]

    def collect_job(self, s: JobSnapshot) -> None:
        """Each new second of the window once the job has been up for the stabilisation interval."""
        thr = s.total_throughput()
        cpus = np.array([np.asarray(c, dtype=float) for c in s.cpu.values()]) if s.cpu else np.empty((0, len(thr)))
        for i, t in enumerate(s.seconds):
            if t <= self.seen_t:
                continue
            self.seen_t = float(t)
            if s.uptime[i] == 0 and t > self.rescaled_at:
                self.restart_s = (self.restart_s or 0.0) + 1.0
            if s.uptime[i] < self.params.stabilization_s or t <= self.rescaled_at:
                continue
            busy = aggregate(list(cpus[:, i]) if cpus.size else [], self.params.busy_time_aggregator)
            # the lag is known now only; the window's newest sample is what the decision reads
            self.collect(JOB_OPERATOR, Sample(float(t), float(thr[i]), busy, float(s.workload[i]), (), s.lag))

    # -- per-vertex mode -------------------------------------------------------------------------

    def decide_vertices(self, s: VertexSnapshot) -> List[Action]:
        self.collect_vertices(s)
        scalable = [v for v in s.vertices if v.scalable]
        chosen = self.changes(s.job.t, [v.name for v in scalable], {v.name: v.parallelism for v in scalable},
                              {v.name: v.keyed for v in scalable}, top=s.job.max_scaleout)
        return [ScaleTo(v, c.new, reason(v, c)) for v, c in chosen.items()]

    def collect_vertices(self, s: VertexSnapshot) -> None:
        """Each new second of the window once the job has been up for the stabilisation interval."""
        job = s.job
        scalable = {v.name for v in s.vertices if v.scalable}
        upstream = {d: u for u, d in s.edges}
        for i, t in enumerate(job.seconds):
            if t <= self.seen_t:
                continue
            self.seen_t = float(t)
            if job.uptime[i] == 0 and t > self.rescaled_at:
                self.restart_s = (self.restart_s or 0.0) + 1.0
            if job.uptime[i] < self.params.stabilization_s or t <= self.rescaled_at:
                continue
            for v in s.vertices:
                if v.name not in scalable:
                    continue
                u = upstream.get(v.name)
                fed = u is not None and u in scalable
                edges = ((u, float(np.nansum(s.vertex(u).records_out[i]))),) if fed and u is not None else ()
                self.collect(v.name, Sample(float(t), float(np.nansum(v.records_in[i])),
                                            aggregate(list(v.busy[i]), self.params.busy_time_aggregator),
                                            0.0 if fed else float(job.workload[i]), edges, 0.0 if fed else job.lag))

    # -- operator mode ---------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> List[Action]:
        order = list(snapshot.operators)
        if snapshot.t - self.rescaled_at >= self.params.stabilization_s:
            for v in order:
                self.collect(v, operator_sample(snapshot, v, self.params.busy_time_aggregator))
        parallelism = {v: view.n for v, view in snapshot.operators.items()}
        keyed = {v: view.type.stateful for v, view in snapshot.operators.items()}
        chosen = self.changes(snapshot.t, order, parallelism, keyed)
        plan, actions = Plan(snapshot), []  # type: Tuple[Plan, List[Action]]
        placement = self.placement or FirstFit()
        for v, c in chosen.items():
            actions += realise(plan, ScaleTo(v, c.new, reason(v, c)), placement)
        return actions + [ReleaseHost(h, "no instance left on the host") for h in plan.empty_hosts()]


def within(c: Change, top: Optional[int]) -> Change:
    if top is None or c.new <= top:
        return c
    return replace(c, new=top, reason=f"{c.reason}; {c.new} capped at the maximum scale-out {top}")


def operator_sample(snapshot: Snapshot, v: str, how: str) -> Sample:
    """An operator's rates over the last monitoring interval."""
    interval = snapshot.monitoring_s
    view = snapshot.operators[v]
    busy = [snapshot.instance_stats[i.id][1] for i in snapshot.instances_of(v) if i.id in snapshot.instance_stats]
    arrivals, edges = 0.0, []
    for src, dst in snapshot.edges:
        if dst != v:
            continue
        rate = snapshot.edge_items.get((src, dst), 0) / interval
        if src in snapshot.operators:
            edges.append((src, rate))
        else:
            arrivals += rate
    fallback = [view.utilisation] if view.utilisation is not None else []
    return Sample(snapshot.t, view.processed / interval, aggregate(busy or fallback, how), arrivals,
                  tuple(edges), float(view.queue))


def reason(vertex: str, c: Change) -> str:
    return f"flink-autoscaler: {vertex} parallelism {c.current} -> {c.new}: {c.reason}"
