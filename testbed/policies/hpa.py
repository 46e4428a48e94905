"""Kubernetes' HPA as a policy (docs/papers/daedalus.md#kubernetes-hpa): every `sync_s` the mean CPU
of each worker over the last `metric_window_s`, relative to its request, against the target
utilisation; the replica computation, stabilisation and rate limits are testbed/policies/hpa_core.py.

Job mode: the workers of the job are the pods. Operator mode: one HPA per operator type, whose
pods are its instances and whose usage is their busy fraction (testbed/policies/operator_mode.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from testbed.model import Action, ScaleTo, Snapshot
from testbed.placement.base import Placement
from testbed.policies.contract import Policy, time_field
from testbed.policies.hpa_core import (
    PERCENT,
    PODS,
    HpaBehaviour,
    HpaState,
    PodMetric,
    ScalingPolicy,
    ScalingRules,
    millicores,
    sync,
    utilisation_pct,
)
from testbed.policies.hpa_core import SELECT_POLICIES as SELECTS
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.registry import register_policy
from testbed.policies.scaling import target_of

MAX_WINDOW_S, MAX_PERIOD_S = 3600.0, 1800.0  # the ranges Kubernetes accepts


@dataclass
class HpaParams:
    target_pct: int = 80  # CPU utilisation target, % of the request
    tolerance: float = 0.1
    sync_s: float = time_field(15.0)
    metric_window_s: float = time_field(15.0)  # Decision: the mean CPU over the last 15 s
    # Behaviour. The defaults are the paper's chart (hpa_core.PAPER_CHART); up_window_s=0 gives
    # autoscaling/v2's defaults (hpa_core.V2_DEFAULTS). A policy with value 0 is absent; a period of
    # 0 is policy_period_s.
    up_window_s: float = time_field(300.0)
    down_window_s: float = time_field(300.0)
    up_select: str = "Max"  # Max | Min | Disabled
    down_select: str = "Max"
    up_percent: int = 100
    up_percent_period_s: float = time_field(0.0)
    up_pods: int = 4
    up_pods_period_s: float = time_field(0.0)
    down_percent: int = 100
    down_percent_period_s: float = time_field(0.0)
    down_pods: int = 0
    down_pods_period_s: float = time_field(0.0)
    policy_period_s: float = time_field(15.0)
    # CPU requests, as a fraction of one worker's capacity (= worker_millicores): request_ratio for
    # every worker, or per worker (job mode: w0, w1, ...; operator mode: an instance id or an operator).
    request_ratio: float = 1.0  # 0.5 = the paper's chart (250m of a 500m limit)
    requests: Dict[str, float] = field(default_factory=dict)
    worker_millicores: int = 1000
    min_replicas: int = 1
    max_replicas: int = 18
    initial_replicas: int = 0  # job mode: 0 = the job's initial parallelism

    def validate(self) -> None:
        if not self.target_pct > 0:
            raise ValueError(f"target_pct: must be > 0, got {self.target_pct}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance: must be in [0, 1), got {self.tolerance}")
        for key in ("sync_s", "metric_window_s", "request_ratio", "worker_millicores"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if not 0 < self.policy_period_s <= MAX_PERIOD_S:
            raise ValueError(f"policy_period_s: must be in (0, {MAX_PERIOD_S:g}], got {self.policy_period_s}")
        for key in ("up_window_s", "down_window_s"):
            if not 0 <= getattr(self, key) <= MAX_WINDOW_S:
                raise ValueError(f"{key}: must be in [0, {MAX_WINDOW_S:g}], got {getattr(self, key)}")
        for d in ("up", "down"):
            if getattr(self, f"{d}_select") not in SELECTS:
                raise ValueError(f"{d}_select: must be one of {', '.join(SELECTS)}, got "
                                 f"{getattr(self, f'{d}_select')!r}")
            for kind in ("percent", "pods"):
                if getattr(self, f"{d}_{kind}") < 0:
                    raise ValueError(f"{d}_{kind}: must be >= 0 (0: no such policy), got "
                                     f"{getattr(self, f'{d}_{kind}')}")
                if not 0 <= getattr(self, f"{d}_{kind}_period_s") <= MAX_PERIOD_S:
                    raise ValueError(f"{d}_{kind}_period_s: must be in [0, {MAX_PERIOD_S:g}] (0: policy_period_s), "
                                     f"got {getattr(self, f'{d}_{kind}_period_s')}")
            if getattr(self, f"{d}_percent") == 0 and getattr(self, f"{d}_pods") == 0:
                raise ValueError(f"{d}_percent: {d}_percent and {d}_pods are both 0; a direction needs a policy "
                                 f"({d}_select=Disabled turns it off)")
        for worker, ratio in self.requests.items():
            if not ratio > 0:
                raise ValueError(f"requests: the request of {worker!r} must be > 0, got {ratio}")
        if self.min_replicas < 1:
            raise ValueError(f"min_replicas: must be >= 1, got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas: must be >= min_replicas ({self.min_replicas}), got {self.max_replicas}")
        if self.initial_replicas < 0:
            raise ValueError(f"initial_replicas: must be >= 0 (0: the job's), got {self.initial_replicas}")

    def _rules(self, d: str) -> ScalingRules:
        policies = tuple(ScalingPolicy(kind, getattr(self, f"{d}_{key}"),
                                       getattr(self, f"{d}_{key}_period_s") or self.policy_period_s)
                         for kind, key in ((PERCENT, "percent"), (PODS, "pods")) if getattr(self, f"{d}_{key}") > 0)
        return ScalingRules(getattr(self, f"{d}_window_s"), policies, getattr(self, f"{d}_select"))

    def behaviour(self) -> HpaBehaviour:
        return HpaBehaviour(scale_up=self._rules("up"), scale_down=self._rules("down"),
                            min_replicas=self.min_replicas, max_replicas=self.max_replicas)

    def request_m(self, *names: str) -> int:
        """The CPU request in millicores of the first of `names` given one, else request_ratio's."""
        ratio = next((self.requests[n] for n in names if n in self.requests), self.request_ratio)
        return max(1, int(round(ratio * self.worker_millicores)))

    def pod(self, cpu: Optional[float], ready: bool, *names: str) -> PodMetric:
        """A worker's CPU (a fraction of one worker's capacity; None: no reading) as the HPA sees it."""
        usage = None if cpu is None else millicores(cpu * self.worker_millicores / 1000)
        return PodMetric(usage, self.request_m(*names), ready)


def job_pods(snapshot: JobSnapshot, params: HpaParams) -> List[PodMetric]:
    """Each worker's mean CPU over the last `metric_window_s` seconds, against its request."""
    n = int(round(params.metric_window_s))
    pods = []
    for w, cpu in snapshot.cpu.items():
        recent = np.asarray(cpu[-n:], dtype=float)
        recent = recent[np.isfinite(recent)]
        pods.append(params.pod(float(recent.mean()) if recent.size else None, snapshot.ready.get(w, True), w))
    return pods


@register_policy("hpa", HpaParams, billing="rebill", placement="first_fit")
class HpaPolicy(Policy):
    name = "hpa"

    def __init__(self, params: HpaParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement
        self.interval_s = params.sync_s
        self.behaviour = params.behaviour()
        self.states: Dict[str, HpaState] = {}

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return self.params.initial_replicas or None

    def decide(self, snapshot: Snapshot) -> List[Action]:
        from testbed.policies.operator_mode import hpa_operator_actions

        return hpa_operator_actions(self, snapshot)

    def decide_job(self, s: JobSnapshot) -> List[Action]:
        target = self.target(JOB_OPERATOR, s.t, s.parallelism, job_pods(s, self.params))
        return [] if target is None else [target]

    def target(self, key: str, now: float, current: int, pods: List[PodMetric]) -> Optional[ScaleTo]:
        """One sync of the HPA of `key` (the job, or an operator type): the replicas it sets, None
        when they stay."""
        p = self.params
        raw, desired = sync(self.states.setdefault(key, HpaState()), self.behaviour, now, current, pods,
                            p.target_pct, p.tolerance)
        return target_of(key, current, desired, reason(p, pods, raw, desired))


def reason(p: HpaParams, pods: List[PodMetric], raw: Optional[int], desired: int) -> str:
    if raw is None:
        return f"hpa-{p.target_pct}: replicas clamped into [{p.min_replicas}, {p.max_replicas}]: {desired}"
    util = utilisation_pct([q for q in pods if q.ready])
    return (f"hpa-{p.target_pct}: utilisation {util} % of request (target {p.target_pct} %), "
            f"recommendation {raw}, stabilised and rate-limited {desired}")
