"""PRESPS: predictive replica counts per operator (Wladdimiro et al., Compas 2023;
docs/papers/presps.md).

At the end of every analysis interval td, for each operator O_i in topological order:

    theta_i^p = lambda_i^p / mu_p                      (4) share of O_p's output sent to O_i
    theta_i   = sum_p theta_i^p * theta_p              (3) share of the topology input reaching O_i
    lamR_i    = lambda_G * theta_i                     (2) persistence forecast of O_i's input
    lamQ_i    = |q_i|                                  (5) backlog (flag queue_propagation: + sum_p lamQ_p*theta_i^p)
    lam_i     = lamR_i + lamQ_i                        (6)
    r_i       = ceil(lam_i * et_i / td), clamped to [1, pool]   (1)

The data provider is a virtual entry operator O_0 with theta_0 = 1 and mu_0 = lambda_G (all items the
sources emitted), so that a source-fed operator gets theta_i^0 = lambda_i^0 / lambda_G; with several
sources and fan-outs (the OEE topology) Eq. (3) needs no change.

What the policy measures, from the snapshots it is given (one per reasoning cycle; it accumulates
every cycle's last monitoring interval until td has passed):
* lambda_G, the per-edge counts lambda_i^p and mu_p: sums over the intervals seen since the last
  decision, scaled to td (the ratios need no scaling);
* q_i: the queue depth at the decision;
* et_i: the service time per item, busy time / items processed in an interval (the busy fractions
  of the instances observed in it, summed, × interval / processed; where the snapshot names no
  instance of the operator, its mean utilisation × active instances), averaged over the intervals
  that end within the first `benchmark_s` (60 s) and then frozen; `et_mode=max_current` takes
  max(benchmark, the last window). The sum, not mean × active: live, an instance that wrote no
  counts in an interval is not observed, and mean × active then counts the observed ones' busy
  time once per active replica (the first interval of a 12-replica pool gave 6 × B's et).

Plan (Alg. 1): k_i = r_i - active_i, carried out as one `SetActive` per operator whose count
changes (mode `pool`: a pre-started pool of `pool` replicas per operator, switched without downtime)
or as ordinary scale-ups/scale-downs (mode `containers`, so that PRESPS can be billed in BTUs). Every
action's reason carries theta, lambda-hat (input + backlog), et and the replica count.

State is explicit (`PrespsEstimator`'s fields) and the policy is pure: no clock, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from testbed.model import Action, InstanceState, ReleaseHost, SetActive, Snapshot
from testbed.placement.base import Placement
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.contract import Policy
from testbed.policies.registry import register_policy
from testbed.policies.scaling import scale_to

ENTRY = "__input__"  # the virtual entry operator O_0 (the data provider)
EPS = 1e-9


@dataclass
class PrespsParams:
    td_s: float = 30.0  # analysis interval
    pool: int = 12  # replicas per operator (the upper bound of r_i)
    min_replicas: int = 1
    initial_active: int = 1  # active replicas per operator before the first decision
    benchmark_s: float = 60.0  # et_i: mean over the monitoring intervals ending within this time, then frozen
    et_mode: str = "benchmark"  # benchmark | max_current
    queue_propagation: bool = False  # thesis form: lamQ_i = q_i + sum_p lamQ_p * theta_i^p
    mode: str = "pool"  # pool: SetActive on pre-started replicas | containers: scale up/down

    def validate(self) -> None:
        if not self.td_s > 0:
            raise ValueError(f"td_s: must be > 0, got {self.td_s}")
        if self.pool < 1:
            raise ValueError(f"pool: must be >= 1, got {self.pool}")
        if not 1 <= self.min_replicas <= self.pool:
            raise ValueError(f"min_replicas: must be in [1, pool={self.pool}], got {self.min_replicas}")
        if not 1 <= self.initial_active <= self.pool:
            raise ValueError(f"initial_active: must be in [1, pool={self.pool}], got {self.initial_active}")
        if self.benchmark_s < 0:
            raise ValueError(f"benchmark_s: must be >= 0, got {self.benchmark_s}")
        if self.et_mode not in ("benchmark", "max_current"):
            raise ValueError(f"et_mode: must be benchmark or max_current, got {self.et_mode!r}")
        if self.mode not in ("pool", "containers"):
            raise ValueError(f"mode: must be pool or containers, got {self.mode!r}")


# ---- the model (pure functions; the unit tests check them by hand) ------------------------------

def edge_shares(edge_items: Mapping[Tuple[str, str], float], processed: Mapping[str, float], input_items: float,
                sources: Sequence[str]) -> Dict[Tuple[str, str], Optional[float]]:
    """Eq. (4) per edge p -> i: lambda_i^p / mu_p, None where mu_p = 0 (unknown). Edges from a
    source are edges from the virtual entry operator (mu_0 = input_items); several sources into one
    operator add up."""
    items: Dict[Tuple[str, str], float] = {}
    for (p, i), n in edge_items.items():
        key = (ENTRY, i) if p in sources else (p, i)
        items[key] = items.get(key, 0.0) + n
    out: Dict[Tuple[str, str], Optional[float]] = {}
    for (p, i), n in items.items():
        mu = input_items if p == ENTRY else processed.get(p, 0.0)
        out[(p, i)] = n / mu if mu > 0 else None
    return out


def propagate_theta(operators: Sequence[str], predecessors: Mapping[str, Sequence[str]],
                    shares: Mapping[Tuple[str, str], float]) -> Dict[str, float]:
    """Eq. (3) in topological order: theta_i = sum over p in pred(i) of theta_i^p * theta_p, with
    theta of the entry operator 1."""
    theta: Dict[str, float] = {ENTRY: 1.0}
    for i in operators:
        theta[i] = sum(shares.get((p, i), 0.0) * theta[p] for p in predecessors[i])
    del theta[ENTRY]
    return theta


def replicas(lam: float, et_s: float, td_s: float, low: int, high: int) -> int:
    """Eq. (1) with ceil, clamped to [low, high]."""
    need = math.ceil(lam * et_s / td_s - 1e-9) if lam > 0 and et_s > 0 else 0
    return max(low, min(high, need))


def plan_changes(targets: Mapping[str, int], active: Mapping[str, int]) -> Dict[str, int]:
    """Alg. 1: k_i = r_i - active_i for the operators whose count changes (k > 0: activate k,
    k < 0: deactivate |k|)."""
    return {o: targets[o] - active[o] for o in targets if targets[o] != active[o]}


@dataclass(frozen=True)
class Estimate:
    """One operator's numbers at a decision (what an action's reason reports)."""

    theta: float
    lam_input: float  # lamR: forecast input over td
    lam_queue: float  # lamQ: backlog term
    et_s: float
    target: int

    @property
    def lam(self) -> float:
        return self.lam_input + self.lam_queue

    def inputs(self, td_s: float) -> str:
        return (f"theta={self.theta:.3f} lam_hat={self.lam:.0f} (input {self.lam_input:.0f} + backlog "
                f"{self.lam_queue:.0f}) et={self.et_s * 1000:.3f} ms td={td_s:g} s")

    def reason(self, td_s: float) -> str:
        return f"PRESPS {self.inputs(td_s)} -> {self.target} replicas"


@dataclass
class PrespsEstimator:
    """The MAPE loop's monitor and analyse steps with their explicit state."""

    params: PrespsParams
    last_decision: float = 0.0
    last_seen: float = -1.0
    observed_s: float = 0.0  # monitoring time accumulated since the last decision
    input_items: float = 0.0
    edge_items: Dict[Tuple[str, str], float] = field(default_factory=dict)
    processed: Dict[str, float] = field(default_factory=dict)
    et_samples: Dict[str, List[float]] = field(default_factory=dict)  # within the benchmark time
    et_current: Dict[str, float] = field(default_factory=dict)  # the last window's
    shares: Dict[Tuple[str, str], float] = field(default_factory=dict)  # last known theta_i^p

    def observe(self, s: Snapshot) -> None:
        """Accumulate the snapshot's last monitoring interval (once per interval)."""
        if s.t <= self.last_seen + EPS or not s.input_rates:
            return
        self.last_seen = s.t
        self.observed_s += s.monitoring_s
        self.input_items += s.input_rates[-1] * s.monitoring_s
        for e, n in s.edge_items.items():
            self.edge_items[e] = self.edge_items.get(e, 0.0) + n
        active = active_counts(s)
        busy = observed_busy(s)
        for o, v in s.operators.items():
            self.processed[o] = self.processed.get(o, 0.0) + v.processed
            if v.processed > 0 and o in busy:
                et = busy[o] * s.monitoring_s / v.processed
            elif v.processed > 0 and v.utilisation is not None and active[o] > 0:
                et = v.utilisation * s.monitoring_s * active[o] / v.processed
            else:
                continue
            self.et_current[o] = et
            if s.t <= self.params.benchmark_s + EPS or not self.et_samples.get(o):
                self.et_samples.setdefault(o, []).append(et)

    def due(self, t: float) -> bool:
        return t - self.last_decision >= self.params.td_s - EPS and self.observed_s > 0

    def et(self, o: str) -> float:
        samples = self.et_samples.get(o)
        bench = sum(samples) / len(samples) if samples else 0.0
        if self.params.et_mode == "max_current":
            return max(bench, self.et_current.get(o, 0.0))
        return bench

    def estimate(self, s: Snapshot) -> Dict[str, Estimate]:
        """Eqs. (2)-(6) and (1) for every operator, then the accumulators start again."""
        p = self.params
        ops = list(s.operators)
        sources = sorted({a for a, _ in s.edges if a not in s.operators})
        predecessors: Dict[str, List[str]] = {o: [] for o in ops}
        for a, b in s.edges:
            pred = ENTRY if a in sources else a
            if b in predecessors and pred not in predecessors[b]:
                predecessors[b].append(pred)
        measured = edge_shares(self.edge_items, self.processed, self.input_items, sources)
        for e, v in measured.items():
            if v is not None:
                self.shares[e] = v
        shares = {e: self.shares.get(e, 1.0) for e in ((q, o) for o in ops for q in predecessors[o])}
        theta = propagate_theta(ops, predecessors, shares)
        lam_g = self.input_items * p.td_s / self.observed_s  # events in td at the observed rate
        lam_q: Dict[str, float] = {}
        out: Dict[str, Estimate] = {}
        for o in ops:  # topological order
            q = float(s.operators[o].queue)
            if p.queue_propagation:
                q += sum(lam_q[a] * shares[(a, o)] for a in predecessors[o] if a != ENTRY)
            lam_q[o] = q
            lam_r = lam_g * theta[o]
            et = self.et(o)
            target = replicas(lam_r + q, et, p.td_s, p.min_replicas, p.pool) if et > 0 else active_counts(s)[o]
            out[o] = Estimate(theta[o], lam_r, q, et, target)
        self.last_decision = s.t
        self.observed_s = self.input_items = 0.0
        self.edge_items, self.processed = {}, {}
        return out


def observed_busy(s: Snapshot) -> Dict[str, float]:
    """Per operator, the busy fractions of its instances observed in the last interval, summed;
    empty if an observed instance is no longer among the snapshot's (its operator's sum would be
    short: the caller then uses mean utilisation × active)."""
    operator_of = {i.id: i.operator for i in s.instances}
    busy: Dict[str, float] = {}
    for instance, (_, utilisation) in s.instance_stats.items():
        o = operator_of.get(instance)
        if o is None:
            return {}
        busy[o] = busy.get(o, 0.0) + utilisation
    return busy


def active_counts(s: Snapshot) -> Dict[str, int]:
    """Active replicas per operator (every instance that is not draining and is switched on)."""
    out = {o: 0 for o in s.operators}
    for i in s.instances:
        if i.operator in out and i.state != InstanceState.draining and i.active:
            out[i.operator] += 1
    return out


def counts(s: Snapshot) -> Dict[str, int]:
    out = {o: 0 for o in s.operators}
    for i in s.instances:
        if i.operator in out and i.state != InstanceState.draining:
            out[i.operator] += 1
    return out


def apply_targets(s: Snapshot, targets: Mapping[str, int], reasons: Mapping[str, str], mode: str,
                  placement: Placement) -> List[Action]:
    """The plan's changes as actions: SetActive (pool) or scale-ups/scale-downs (containers, with
    hosts left empty released)."""
    if mode == "pool":
        active = active_counts(s)
        return [SetActive(o, targets[o], reasons[o]) for o in plan_changes(targets, active)]
    plan = Plan(s)
    actions: List[Action] = []
    for o in plan_changes(targets, counts(s)):
        actions += scale_to(plan, o, targets[o], placement, reasons[o])
    for host in plan.empty_hosts():
        actions.append(ReleaseHost(host, "no instance left on the host"))
    return actions


def pool_setup(s: Snapshot, params: PrespsParams, placement: Placement) -> List[Action]:
    """Before the first decision (mode pool): start the missing pool members and leave
    `initial_active` per operator switched on."""
    plan = Plan(s)
    actions: List[Action] = []
    have = counts(s)
    for o in s.operators:
        if have[o] < params.pool:
            actions += scale_to(plan, o, params.pool, placement, f"pool of {params.pool} replicas")
    for o in s.operators:
        actions.append(SetActive(o, params.initial_active, f"pool of {params.pool}: {params.initial_active} active "
                                                           "until the first decision"))
    return actions


@register_policy("presps", PrespsParams, billing="rebill", placement="first_fit")
class PrespsPolicy(Policy):
    name = "presps"

    def __init__(self, params: PrespsParams, placement: Optional[Placement] = None):
        self.params = params
        self.placement = placement or FirstFit()
        self.estimator = PrespsEstimator(params)
        self.started = False

    def decide(self, snapshot: Snapshot) -> List[Action]:
        actions: List[Action] = []
        if not self.started:
            self.started = True
            if self.params.mode == "pool":
                actions += pool_setup(snapshot, self.params, self.placement)
        self.estimator.observe(snapshot)
        if not self.estimator.due(snapshot.t):
            return actions
        est = self.estimator.estimate(snapshot)
        targets = {o: e.target for o, e in est.items()}
        reasons = {o: e.reason(self.params.td_s) for o, e in est.items()}
        return actions + apply_targets(snapshot, targets, reasons, self.params.mode, self.placement)
