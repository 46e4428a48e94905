"""Kubernetes' HPA as a policy (docs/papers/daedalus.md#kubernetes-hpa): every `sync_s` the mean CPU
of each worker over the last `metric_window_s`, relative to its request, against the target
utilisation; the replica computation, stabilisation and rate limits are testbed/policies/hpa_core.py.

Job mode: the workers of the job are the pods. Operator mode: one HPA per operator type, whose
pods are its instances and whose usage is their busy fraction (testbed/policies/operator_mode.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from testbed.model import Action, ScaleDown, ScaleUp, Snapshot
from testbed.placement.base import Placement
from testbed.policies.hpa_core import HpaBehaviour, HpaState, PodMetric, ScalingPolicy, sync
from testbed.policies.job_inputs import JOB_OPERATOR, JobSnapshot
from testbed.policies.registry import register_policy


@dataclass
class HpaParams:
    target_pct: int = 80  # CPU utilisation target, % of the request
    tolerance: float = 0.1
    sync_s: float = 15.0
    metric_window_s: float = 15.0  # Decision: the mean CPU over the last 15 s
    up_window_s: float = 300.0  # the paper's chart; Kubernetes' default is 0
    down_window_s: float = 300.0
    up_percent: int = 100  # scale-up policies per 15 s: max(+100 %, +4 pods)
    up_pods: int = 4
    down_percent: int = 100  # scale-down policy per 15 s
    policy_period_s: float = 15.0
    request_ratio: float = 1.0  # request / one worker's capacity; 0.5 = the paper's chart (250m of 500m)
    min_replicas: int = 1
    max_replicas: int = 18
    initial_replicas: int = 0  # job mode: 0 = the job's initial parallelism

    def validate(self) -> None:
        if not 0 < self.target_pct:
            raise ValueError(f"target_pct: must be > 0, got {self.target_pct}")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance: must be in [0, 1), got {self.tolerance}")
        for key in ("sync_s", "metric_window_s", "policy_period_s", "request_ratio"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        for key in ("up_window_s", "down_window_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0, got {getattr(self, key)}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"min_replicas: must be in [1, max_replicas ({self.max_replicas})], got {self.min_replicas}")

    def behaviour(self) -> HpaBehaviour:
        return HpaBehaviour(
            up_window_s=self.up_window_s, down_window_s=self.down_window_s,
            up_policies=(ScalingPolicy("percent", self.up_percent, self.policy_period_s),
                         ScalingPolicy("pods", self.up_pods, self.policy_period_s)),
            down_policies=(ScalingPolicy("percent", self.down_percent, self.policy_period_s),),
            min_replicas=self.min_replicas, max_replicas=self.max_replicas)


def job_pods(snapshot: JobSnapshot, window_s: float, request_ratio: float) -> List[PodMetric]:
    """Each worker's mean CPU over the last `window_s` seconds relative to its request."""
    n = int(round(window_s))
    pods = []
    for w, cpu in snapshot.cpu.items():
        recent = np.asarray(cpu[-n:], dtype=float)
        recent = recent[np.isfinite(recent)]
        usage = float(recent.mean()) / request_ratio if recent.size else None
        pods.append(PodMetric(usage, snapshot.ready.get(w, True)))
    return pods


def job_actions(current: int, target: int, reason: str) -> List[Action]:
    """A job-mode rescale as actions on the job operator: one per worker added or removed (the
    newest workers go first)."""
    if target > current:
        return [ScaleUp(JOB_OPERATOR, JOB_OPERATOR, reason) for _ in range(target - current)]
    return [ScaleDown(JOB_OPERATOR, f"w{i}", JOB_OPERATOR, reason) for i in range(current - 1, target - 1, -1)]


@register_policy("hpa", HpaParams, billing="rebill", placement="first_fit")
class HpaPolicy:
    name = "hpa"

    def __init__(self, params: HpaParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement
        self.interval_s = params.sync_s
        self.behaviour = params.behaviour()
        self.states: Dict[str, HpaState] = {}

    def initial_parallelism(self, max_scaleout: int) -> Optional[int]:
        return self.params.initial_replicas or None

    def decide(self, snapshot) -> List[Action]:
        if isinstance(snapshot, JobSnapshot):
            return self._job(snapshot)
        if isinstance(snapshot, Snapshot):
            from testbed.policies.operator_mode import hpa_operator_actions

            return hpa_operator_actions(self, snapshot)
        raise TypeError(f"hpa: cannot read a {type(snapshot).__name__}")

    def _job(self, s: JobSnapshot) -> List[Action]:
        p = self.params
        pods = job_pods(s, p.metric_window_s, p.request_ratio)
        state = self.states.setdefault(JOB_OPERATOR, HpaState())
        raw, desired = sync(state, self.behaviour, s.t, s.parallelism, pods, p.target_pct, p.tolerance)
        if desired == s.parallelism:
            return []
        usages = [q.usage for q in pods if q.usage is not None and q.ready]
        util = 100.0 * sum(usages) / len(usages) if usages else float("nan")
        reason = (f"hpa-{p.target_pct}: utilisation {util:.1f} % of request (target {p.target_pct} %), "
                  f"recommendation {raw}, stabilised and rate-limited {desired}")
        return job_actions(s.parallelism, desired, reason)
