"""The BTU-based provisioning policy (docs/papers/btu-provisioning.md#algorithm-1-upscaling-trigger to
#host-release-at-the-btu-end): scale up on SLO threats, scale down only when a host's paid time runs
out, then either release the host (moving what must stay) or prolong it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from testbed.model import (
    NEW_HOST_PREFIX,
    Action,
    LeaseHost,
    Migrate,
    OperatorType,
    ProlongHost,
    ReleaseHost,
    ScaleDown,
    ScaleUp,
    Snapshot,
)
from testbed.placement.base import Placement
from testbed.placement.suitability import Suitability, SuitabilityParams
from testbed.plan import Plan
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy


class UtilityVariant(str, Enum):
    paper = "paper"  # 1 + W1*instances + W2*queueLoad - W3*delay - W4*scalings, delay=(d/slo)(1+P)
    preprint = "preprint"  # W1*instances - W2*delay - W3*scalings + W4*queueLoad, delay=(d/slo)P


class TriggerVariant(str, Enum):
    paper = "paper"  # Algorithm 1: newest duration or its OLS trend above the SLO, and queue > scalingThreshold
    visp2017 = "visp2017"  # as implemented: mean of the last N or a regression through the origin, or a long queue


@dataclass
class BtuParams:
    """The BTU policy's parameters (the paper's configuration; the BTU length is billing's)."""

    scaling_threshold: int = 50
    samples: int = 5  # N durations in the regression
    queue_load: float = 100.0  # QL
    w1: float = 1.0
    w2: float = 1.0
    w3: float = 1.0
    w4: float = 1.0
    utility_variant: UtilityVariant = UtilityVariant.paper
    release_window_fraction: float = 0.05  # of the BTU
    release_window_min_s: float = 0.0  # VISP: 40 s; the reasoning interval is always a lower bound
    removal_cap: float = 0.2  # share of a type's instances a release may remove
    trigger_variant: TriggerVariant = TriggerVariant.paper
    trigger_queue_alone: int = 250  # visp2017 trigger: queue > this scales up alone, twice with a slow mean
    prolong_after_lease_s: float = 0.0  # VISP: 180 s; a due host is prolonged while any host is this young

    def validate(self) -> None:
        """Raises ValueError naming the field (the config prefixes it with `policies.btu.`)."""
        if self.samples <= 0:
            raise ValueError("samples: must be > 0")
        if not 0 < self.removal_cap <= 1:
            raise ValueError(f"removal_cap: must be in (0, 1], got {self.removal_cap}")
        if self.trigger_queue_alone < self.scaling_threshold:
            raise ValueError(f"trigger_queue_alone: must be >= scaling_threshold ({self.scaling_threshold})")
        if self.prolong_after_lease_s < 0:
            raise ValueError("prolong_after_lease_s: must be >= 0")
        if not 0 <= self.release_window_fraction < 1:
            raise ValueError("release_window_fraction: must be in [0, 1)")


@dataclass(frozen=True)
class Trigger:
    """Algorithm 1's verdict and the numbers behind it."""

    up: bool
    duration: Optional[float]
    predicted: Optional[float]
    queue: int
    reason: str
    instances: int = 1  # how many to start when up


def upscaling_trigger(durations: Sequence[float], slo: float, queue: int, scaling_threshold: int) -> Trigger:
    """Algorithm 1: the current duration or its linear trend exceeds the SLO, and enough is queued."""
    if not durations:
        return Trigger(False, None, None, queue, "no duration measured yet")
    d = durations[-1]
    up = d > slo
    predicted = None
    n = len(durations)
    if n >= 2:
        # Ordinary least squares d_i ~ alpha + beta * i, i = 1..N, extrapolated to N + 1.
        mean_i = (n + 1) / 2
        mean_d = sum(durations) / n
        beta = sum((i - mean_i) * (di - mean_d) for i, di in enumerate(durations, start=1)) / sum(
            (i - mean_i) ** 2 for i in range(1, n + 1)
        )
        predicted = mean_d + beta * (n + 1 - mean_i)
        up = up or predicted > slo
    trend = "" if predicted is None else f", predicted {predicted:.0f} ms"
    reason = f"d {d:.0f} ms{trend} vs slo {slo:.0f} ms, queue {queue} vs {scaling_threshold}"
    return Trigger(up and queue > scaling_threshold, d, predicted, queue, reason)


def visp_upscaling_trigger(durations: Sequence[float], slo: float, queue: int, scaling_threshold: int,
                           queue_alone: int) -> Trigger:
    """The trigger of the original implementation (docs/papers/btu-provisioning.md#visp-policies): the
    mean of the last N durations above the SLO with queue > scalingThreshold (two instances when the queue also
    exceeds queue_alone); or a least-squares line through the origin over i = 1..N, extrapolated to
    N + 1 (about 1.6 x a weighted recent mean for N = 5), above the SLO with queue > scalingThreshold;
    or queue > queue_alone on its own."""
    long_queue = queue > queue_alone
    if not durations:
        return Trigger(long_queue, None, None, queue, f"queue {queue} vs {queue_alone}, no duration measured yet")
    n = len(durations)
    mean = sum(durations) / n
    predicted = (n + 1) * sum(i * d for i, d in enumerate(durations, start=1)) / sum(i * i for i in range(1, n + 1))
    slow = mean > slo
    instances = 2 if slow and long_queue else 1
    up = long_queue or ((slow or predicted > slo) and queue > scaling_threshold)
    reason = (f"mean {mean:.0f} ms, through-origin prediction {predicted:.0f} ms vs slo {slo:.0f} ms, "
              f"queue {queue} vs {scaling_threshold}/{queue_alone}")
    return Trigger(up, mean, predicted, queue, reason, instances)


def downscale_utility(
    name: str, plan: Plan, queue: int, duration: Optional[float], penalty: float, cfg: BtuParams
) -> float:
    """Algorithm 3: how suitable the type is for losing an instance; higher is better, < 0 never."""
    n = plan.n[name]
    if n < 2:
        return -1.0
    counts = plan.n.values()
    lo, hi = min(counts), max(counts)
    instances = (n - lo) / (hi - lo) if hi > lo else 0.0
    ratio = (duration or 0.0) / plan.types[name].slo_ms
    total_scalings = sum(plan.scalings.values())
    scalings = plan.scalings[name] / total_scalings if total_scalings else 0.0
    queue_load = cfg.queue_load if queue < 1 else 0.0
    if cfg.utility_variant == UtilityVariant.preprint:
        delay = ratio * penalty
        return cfg.w1 * instances - cfg.w2 * delay - cfg.w3 * scalings + cfg.w4 * queue_load
    delay = ratio * (1 + penalty)
    return 1 + cfg.w1 * instances + cfg.w2 * queue_load - cfg.w3 * delay - cfg.w4 * scalings


def release_window_s(fraction: float, minimum_s: float, btu_s: float, reasoning_s: float) -> float:
    """Hosts are examined when this little paid time remains (Decision: never below one cycle, so
    a 60 s cycle cannot skip the 30 s window of a 10-minute BTU)."""
    return max(fraction * btu_s, minimum_s, reasoning_s)


def release_window(cfg: BtuParams, btu_s: float, reasoning_s: float) -> float:
    return release_window_s(cfg.release_window_fraction, cfg.release_window_min_s, btu_s, reasoning_s)


@register_policy("btu", BtuParams, billing="own", placement="suitability")
class BtuPolicy(Policy):
    name = "btu"

    def __init__(self, cfg: BtuParams, placement: Optional[Placement] = None):
        self.cfg = cfg
        self.placement = placement or Suitability(SuitabilityParams().cache_factor)

    def decide(self, snapshot: Snapshot) -> List[Action]:
        plan = Plan(snapshot)
        actions: List[Action] = []
        window = release_window(self.cfg, snapshot.btu_s, snapshot.reasoning_s)
        due = [
            h.id for h in sorted(snapshot.hosts, key=lambda h: (h.btu_end, h.id))
            if not h.releasing and h.btu_end - snapshot.t <= window
        ]
        young = self._young_host(snapshot)
        if young is not None:  # VISP: a recent lease means load is rising; keep every due host
            actions += [ProlongHost(host_id, young) for host_id in due]
        else:
            for k, host_id in enumerate(due):
                # Hosts decided later in this cycle may go too: they are no migration target yet.
                plan, host_actions = self._release_or_prolong(snapshot, plan, host_id, window, due[k + 1 :])
                actions += host_actions
        for view in snapshot.operators.values():
            durations = view.durations[-self.cfg.samples :]
            if self.cfg.trigger_variant == TriggerVariant.visp2017:
                trigger = visp_upscaling_trigger(durations, view.type.slo_ms, view.queue, self.cfg.scaling_threshold,
                                                 self.cfg.trigger_queue_alone)
            else:
                trigger = upscaling_trigger(durations, view.type.slo_ms, view.queue, self.cfg.scaling_threshold)
            for _ in range(trigger.instances if trigger.up else 0):
                actions += self._upscale(snapshot, plan, view.name, trigger.reason)
        return actions

    def _young_host(self, snapshot: Snapshot) -> Optional[str]:
        """The reason to prolong without checks when a host was leased less than
        prolong_after_lease_s ago (0 = never); None otherwise."""
        limit = self.cfg.prolong_after_lease_s
        if limit <= 0 or not snapshot.hosts:
            return None
        age, host_id = min((snapshot.t - h.leased_at, h.id) for h in snapshot.hosts)
        if age >= limit:
            return None
        return f"host {host_id} leased {age:.0f} s ago (< {limit:.0f} s): prolonged without further checks"

    # -- the upscaling procedure (docs/papers/btu-provisioning.md#upscaling-procedure) -------
    def _upscale(self, snapshot: Snapshot, plan: Plan, name: str, reason: str) -> List[Action]:
        host, actions = self._place_without_lease(snapshot, plan, name)
        if host is None:
            if not plan.can_lease():
                return actions
            host = plan.lease()
            actions.append(LeaseHost(host, f"no host has room for {name}: {reason}"))
        plan.place(name, host)
        actions.append(ScaleUp(name, host, reason))
        return actions

    def _place_without_lease(self, snapshot: Snapshot, plan: Plan, name: str) -> Tuple[Optional[str], List[Action]]:
        """Steps 1-2: the best-suited host, else room made by scaling other types down. The removals
        are simulated first and then carried out together, so nothing is reconfigured in vain."""
        op = plan.types[name]
        best = self._best_host(plan, op)
        if best is not None:
            return best, []
        room = self._room_by_scaling_down(snapshot, plan, op)
        if room is None:
            return None, []
        host_id, victims = room
        actions: List[Action] = []
        for instance, victim_op, utility in victims:
            plan.remove(host_id, instance)
            actions.append(ScaleDown(victim_op, instance, host_id, f"make room for {name} (utility {utility:.3f})"))
        return self._best_host(plan, op), actions

    def _best_host(self, plan: Plan, op: OperatorType) -> Optional[str]:
        return self.placement.host_for(plan, op)

    def _utilities(self, snapshot: Snapshot, plan: Plan, names: Iterable[str]) -> Dict[str, float]:
        ops = snapshot.operators
        return {
            n: downscale_utility(n, plan, ops[n].queue, ops[n].duration, snapshot.penalty, self.cfg)
            for n in sorted(names)
        }

    def _room_by_scaling_down(
        self, snapshot: Snapshot, plan: Plan, op: OperatorType
    ) -> Optional[Tuple[str, List[Tuple[str, str, float]]]]:
        """Simulate removing instances of positive-utility types (highest first) on each host; if op
        then fits somewhere, return the host needing the fewest removals and those removals."""
        utilities = self._utilities(snapshot, plan, [t for t in plan.types if t != op.name])
        positive = {t: u for t, u in utilities.items() if u > 0}
        best: Optional[Tuple[int, int, str, List[Tuple[str, str, float]]]] = None
        for k, host in enumerate(plan.candidate_hosts()):
            victims = sorted(
                (-positive[t], plan.order[iid], iid, t)
                for iid, t in host.instances
                if t in positive and not iid.startswith(NEW_HOST_PREFIX)  # not one started this cycle
            )
            cpu, memory, left, removed = host.cpu_free, host.memory_free, dict(plan.n), []
            for _, _, iid, t in victims:
                if cpu >= op.cpu and memory >= op.memory:
                    break
                if left[t] < 2:  # every type keeps an instance
                    continue
                left[t] -= 1
                cpu += plan.types[t].cpu
                memory += plan.types[t].memory
                removed.append((iid, t, positive[t]))
            if removed and cpu >= op.cpu and memory >= op.memory and (best is None or (len(removed), k) < best[:2]):
                best = (len(removed), k, host.id, removed)
        return None if best is None else (best[2], best[3])

    # -- host release at the end of its BTU (docs/papers/btu-provisioning.md#host-release-at-the-btu-end)
    def _release_or_prolong(
        self, snapshot: Snapshot, plan: Plan, host_id: str, window: float, undecided: Sequence[str]
    ) -> Tuple[Plan, List[Action]]:
        """Returns the plan to continue with (the simulated one if the host goes) and the actions."""
        remaining = plan.hosts[host_id].btu_end - snapshot.t
        trial = plan.copy()
        for other in undecided:
            trial.hosts[other].excluded = True
        host = trial.hosts[host_id]
        host.excluded = True
        on_host = list(host.instances)
        utilities = self._utilities(snapshot, trial, {t for _, t in on_host})
        removals: List[Tuple[str, str]] = []
        migrations: List[Tuple[str, str]] = []
        for t in sorted(utilities):
            mine = [(iid, op) for iid, op in on_host if op == t]
            cap = max(1, math.floor(self.cfg.removal_cap * trial.n[t])) if utilities[t] > 0 else 0
            removals += mine[:cap]
            migrations += mine[cap:]
        head = f"BTU ends in {remaining:.0f} s (window {window:.0f} s); utilities " + ", ".join(
            f"{t} {u:.3f}" for t, u in utilities.items()
        )
        actions: List[Action] = []
        for iid, t in removals:
            trial.remove(host_id, iid)
            actions.append(ScaleDown(t, iid, host_id,
                                     f"{head}; removed with the host (≤ {self.cfg.removal_cap:.0%} of {t})"))
        moves: List[str] = []
        for iid, t in migrations:
            target, freeing = self._place_without_lease(snapshot, trial, t)
            if target is None:
                return plan, [ProlongHost(host_id, f"{head}; no room to migrate {t} ({iid}) without a new host")]
            actions += freeing
            trial.move(host_id, iid, target)
            moves.append(f"{t}→{target}")
            actions.append(Migrate(t, iid, host_id, target, f"{head}; migrated before release"))
        plan_text = f"remove {len(removals)}, migrate {len(migrations)}" + (f" ({', '.join(moves)})" if moves else "")
        actions.append(ReleaseHost(host_id, f"{head}; plan: {plan_text}"))
        for other in undecided:
            trial.hosts[other].excluded = False
        return trial, actions
