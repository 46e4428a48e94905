"""ODP as a placement strategy (`placement.name=odp`; spec odp.md §15.1, docs/papers/odp.md#odp-in-the-testbed).

Every placement is an ODP instance built from the policy's plan:
* operators (V_dsp): every instance of every operator, plus one vertex per topology source (the data
  provider) pinned to the provider's host; operators named in `placement.pins` are pinned to their
  host;
* edges: every instance of i to every instance of j for each topology edge (i, j), the measured rate
  of (i, j) split evenly among the instance pairs;
* C: CPU shares and memory of the operator type against the host's; R: the measured mean service
  time (busy time per processed item of the last monitoring interval; 0 before any); S = 1;
* nodes and links: the plan's hosts with the emulated network's availabilities and mean delays
  (testbed/emulation.py).

Existing instances are pinned to their hosts (only new ones are free) unless `reoptimise_all`.
Host leasing stays with the policy: ODP chooses among the hosts the plan offers, and only when no
placement fits does it lease one more (as every strategy does) and solve again.

Two-step S-ODP: an objective with a network term (w_z > 0) needs edge rates, unknown at the
start. Until `rates_after_s` ODP solves with w_a = 1; the first call of `moves` at or after it
re-solves with every instance free, the measured rates and the configured weights, and returns the
migrations. Without a network term the rates do not enter the objective, so the first solve already
uses the configured weights and there is no second step.

Every solve is kept in `runs` (status, objective, gap, time, the placement's predicted R and A);
the reason of each action names the solve (`odp solve <k>: ...`), which is how the `placements`
table joins the two (testbed/placement/records.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from testbed.emulation import EmulationConfig, NetworkModel
from testbed.model import NEW_HOST_PREFIX, Action, LeaseHost, Migrate, OperatorType, ScaleUp
from testbed.placement.base import Placement, PlacementChoice, PlacementParams, register_placement
from testbed.placement.odp.instance import Edge, Link, NetworkObjective, Node, OdpInstance, Operator, Weights
from testbed.placement.odp.result import OdpResult, SolverName, SolverSettings, Status
from testbed.placement.odp.solve import solve
from testbed.plan import Plan

SOURCE_PREFIX = "source:"


@dataclass(frozen=True)
class SolveRecord:
    """One solver run behind placement decisions."""

    solve: int  # 1-based, in the order of the run
    t_s: float
    purpose: str  # place | reassign
    weights: Tuple[float, float, float]  # w_r, w_a, w_z used
    status: str
    objective: Optional[float]
    gap: Optional[float]
    solve_s: float  # wall clock
    cpu_s: float  # CPU time of the solver (on a shared machine wall time also measures the neighbours)
    response_time_ms: Optional[float]  # predicted by the model for the placement found
    availability: Optional[float]
    network: Optional[float]
    operators: int
    nodes: int
    placement: Mapping[str, str]  # ODP vertex -> host (instances by their ids; new ones as <operator>#new<k>)


def service_ms(plan: Plan, operator: str) -> float:
    """Measured mean service time of the last monitoring interval (busy time per processed item,
    one item in service per instance); 0 before any measurement."""
    view = plan.snapshot.operators.get(operator)
    if view is None or not view.processed or view.utilisation is None:
        return 0.0
    active = view.active if view.active is not None else view.n
    return view.utilisation * plan.snapshot.monitoring_s * 1000.0 * max(active, 1) / view.processed


def edge_rates(plan: Plan) -> Dict[Tuple[str, str], float]:
    """Items per second along each topology edge in the last monitoring interval."""
    snap = plan.snapshot
    return {e: snap.edge_items.get(e, 0) / snap.monitoring_s for e in snap.edges}


@dataclass
class OdpPlacementConfig(PlacementParams):
    """`placement.odp.*`: the ODP integer program as a placement (docs/papers/odp.md#odp-in-the-testbed)."""

    w_r: float = 1.0  # SAW weights of response time, availability, the network term; they sum to 1
    w_a: float = 0.0
    w_z: float = 0.0
    network_objective: str = ""  # traffic | network_usage | elastic_energy; needed when w_z > 0
    solver: str = "highs"  # highs | cbc
    time_limit_s: float = 10.0  # per solve; a time-limited incumbent is used and logged as such
    mip_rel_gap: float = 1e-4
    reoptimise_all: bool = False  # placing new instances may also move existing ones (else they are pinned)
    rates_after_s: float = 100.0  # two-step S-ODP: w_a = 1 until then (no rates), then a re-solve with them

    def validate(self) -> Optional[Tuple[str, str]]:
        for name in ("w_r", "w_a", "w_z"):
            if not 0 <= getattr(self, name) <= 1:
                return name, f"must lie in [0, 1], got {getattr(self, name)}"
        if abs(self.w_r + self.w_a + self.w_z - 1.0) > 1e-9:
            return "w_r", f"w_r + w_a + w_z must be 1, got {self.w_r + self.w_a + self.w_z:g}"
        return self._objective_problem() or self._solver_problem()

    def _objective_problem(self) -> Optional[Tuple[str, str]]:
        objectives = tuple(o.value for o in NetworkObjective)
        if self.network_objective not in ("",) + objectives:
            return "network_objective", f"must be one of {objectives} or empty, got {self.network_objective!r}"
        if self.w_z > 0 and not self.network_objective:
            return "network_objective", "is needed when placement.odp.w_z > 0"
        return None

    def _solver_problem(self) -> Optional[Tuple[str, str]]:
        if self.solver not in tuple(s.value for s in SolverName):
            return "solver", f"must be highs or cbc, got {self.solver!r}"
        if not self.time_limit_s > 0:
            return "time_limit_s", f"must be > 0, got {self.time_limit_s}"
        if not 0 <= self.mip_rel_gap < 1:
            return "mip_rel_gap", f"must lie in [0, 1), got {self.mip_rel_gap}"
        if self.rates_after_s < 0:
            return "rates_after_s", "must be >= 0"
        return None


class OdpPlacement(Placement):
    name = "odp"

    def __init__(self, params: OdpPlacementConfig, pins: Dict[str, str]):
        self.cfg = params
        self.pins = dict(pins)
        self.network = NetworkModel(EmulationConfig())
        self.provider_host = EmulationConfig().provider_host
        self.runs: List[SolveRecord] = []
        self.choices: List[Tuple[float, str, str, int]] = []  # host_for answers: (t, operator, host, solve)
        self.reassigned = False
        self.objective = NetworkObjective(self.cfg.network_objective) if self.cfg.network_objective else None

    def bind_run(self, run_cfg: Any) -> None:
        emulation = run_cfg.backend.emulation
        self.network = NetworkModel(emulation)
        self.provider_host = emulation.provider_host

    # -- the Placement interface -------------------------------------------------------------
    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        result, names = self._solve(plan, {op.name: 1}, free=False, purpose="place")
        if result is None or result.placement is None:
            return None
        host = result.placement[names[0][0]]
        # the policy writes the action and its reason: the placements table joins the solve on these
        self.choices.append((plan.t, op.name, host, self.runs[-1].solve))
        return host

    def start(self, plan: Plan, operator: str, count: int, reason: str) -> List[Action]:
        return self.start_many(plan, {operator: count}, reason)

    def start_many(self, plan: Plan, counts: Dict[str, int], reason: str) -> List[Action]:
        counts = {o: c for o, c in counts.items() if c > 0}
        if not counts:
            return []
        actions: List[Action] = []
        result, names = self._solve(plan, counts, free=self.cfg.reoptimise_all, purpose="place")
        while (result is None or result.placement is None) and plan.can_lease():
            host = plan.lease()
            actions.append(LeaseHost(host, f"no placement of {sum(counts.values())} instance(s) fits: {reason}"))
            result, names = self._solve(plan, counts, free=self.cfg.reoptimise_all, purpose="place")
        if result is None or result.placement is None:
            return actions
        return actions + self._apply(plan, result.placement, names, self._reason(reason))

    def moves(self, plan: Plan) -> List[Action]:
        """The second step of S-ODP: once, at or after `rates_after_s`, when the objective has a
        network term and rates were measured."""
        if self.reassigned or self.cfg.w_z <= 0 or plan.t < self.cfg.rates_after_s:
            return []
        if not any(edge_rates(plan).values()):
            return []
        self.reassigned = True
        result, names = self._solve(plan, {}, free=True, purpose="reassign")
        if result is None or result.placement is None:
            return []
        return self._apply(plan, result.placement, names, self._reason("re-solve with the measured rates"))

    # -- the instance ----------------------------------------------------------------------
    def _weights(self, plan: Plan, purpose: str) -> Tuple[Weights, Optional[NetworkObjective]]:
        cfg = self.cfg
        if cfg.w_z > 0 and not self.reassigned and purpose == "place":
            return Weights(r=0.0, a=1.0, z=0.0), None  # step one: no rates yet
        return Weights(r=cfg.w_r, a=cfg.w_a, z=cfg.w_z), (self.objective if cfg.w_z > 0 else None)

    def instance(self, plan: Plan, counts: Mapping[str, int], free: bool, purpose: str
                 ) -> Tuple[OdpInstance, List[Tuple[str, str]]]:
        """The ODP instance of placing `counts` new instances on the plan; also the new instances'
        vertex names with their operator."""
        snap = plan.snapshot
        offered = [h.id for h in plan.candidate_hosts()]
        node_ids = list(plan.hosts)
        if self.provider_host not in node_ids:
            node_ids.append(self.provider_host)  # it holds only the provider (no capacity)
        members: Dict[str, List[str]] = {o: [] for o in plan.types}
        candidates: Dict[str, Tuple[str, ...]] = {}
        existing = sorted(((plan.order[iid], iid, o, h.id) for h in plan.hosts.values() for iid, o in h.instances))
        for _, iid, o, host in existing:
            members[o].append(iid)
            movable = free and not iid.startswith(NEW_HOST_PREFIX)
            candidates[iid] = self._candidates(o, offered, node_ids) if movable else (host,)
        names: List[Tuple[str, str]] = []
        for o, count in counts.items():
            for k in range(count):
                name = f"{o}#new{k + 1}"
                members[o].append(name)
                names.append((name, o))
                candidates[name] = self._candidates(o, offered, node_ids)
        operators: List[Operator] = []
        sources = sorted({a for a, _ in snap.edges if a not in plan.types})
        for s in sources:
            operators.append(Operator(SOURCE_PREFIX + s, (0.0, 0.0), 0.0, (self.provider_host,)))
            members[s] = [SOURCE_PREFIX + s]
        for o, vertices in members.items():
            if o not in plan.types:
                continue
            t = plan.types[o]
            r = service_ms(plan, o)
            operators += [Operator(v, (float(t.cpu), float(t.memory)), r, candidates[v]) for v in vertices]
        weights, objective = self._weights(plan, purpose)
        rates = edge_rates(plan)
        edges = []
        for a, b in snap.edges:
            senders, receivers = members.get(a, []), members.get(b, [])
            if not senders or not receivers:
                continue
            share = rates.get((a, b), 0.0) / (len(senders) * len(receivers))
            edges += [Edge(u, v, share) for u in senders for v in receivers]
        nodes = []
        for h in node_ids:
            plan_host = plan.hosts.get(h)
            capacity = (float(plan_host.cpu), float(plan_host.memory)) if plan_host is not None else (0.0, 0.0)
            nodes.append(Node(h, capacity, 1.0, self.network.host_availability(h)))
        links = [Link(u, v, self.network.mean_delay_ms(u, v), self.network.link_availability(u, v))
                 for u in node_ids for v in node_ids if u != v]
        inst = OdpInstance(tuple(operators), tuple(edges), tuple(nodes), tuple(links), weights, objective)
        return inst, names

    def _candidates(self, operator: str, offered: List[str], node_ids: List[str]) -> Tuple[str, ...]:
        pin = self.pins.get(operator)
        if pin is not None and pin in node_ids:
            return (pin,)
        return tuple(offered) if offered else tuple(node_ids)

    def _solve(self, plan: Plan, counts: Mapping[str, int], free: bool, purpose: str
               ) -> Tuple[Optional[OdpResult], List[Tuple[str, str]]]:
        inst, names = self.instance(plan, counts, free, purpose)
        settings = SolverSettings(solver=SolverName(self.cfg.solver), time_limit_s=self.cfg.time_limit_s,
                                  mip_rel_gap=self.cfg.mip_rel_gap, threads=1, seed=1)
        result = solve(inst, settings)
        w = inst.weights
        self.runs.append(SolveRecord(
            solve=len(self.runs) + 1, t_s=plan.t, purpose=purpose, weights=(w.r, w.a, w.z),
            status=result.status.value, objective=result.objective, gap=result.gap, solve_s=result.solve_s,
            cpu_s=result.cpu_s,
            response_time_ms=result.response_time_ms, availability=result.availability, network=result.network,
            operators=len(inst.operators), nodes=len(inst.nodes), placement=dict(result.placement or {}),
        ))
        if result.status not in (Status.OPTIMAL, Status.TIME_LIMIT):
            return None, names
        return result, names

    def _reason(self, why: str) -> str:
        run = self.runs[-1]
        objective = "none" if run.objective is None else f"{run.objective:.6g}"
        gap = "none" if run.gap is None else f"{run.gap:.3g}"
        r = "?" if run.response_time_ms is None else f"{run.response_time_ms:.1f} ms"
        a = "?" if run.availability is None else f"{run.availability:.4f}"
        w_r, w_a, w_z = run.weights
        return (f"odp solve {run.solve}: {run.status}, objective {objective}, gap {gap}, "
                f"{run.solve_s * 1000:.0f} ms; weights r {w_r:g} a {w_a:g} z {w_z:g}; predicted R {r}, A {a} ({why})")

    # -- the plan ----------------------------------------------------------------------------
    @staticmethod
    def _apply(plan: Plan, placement: Mapping[str, str], names: List[Tuple[str, str]], reason: str) -> List[Action]:
        """Migrations of existing instances the solution moved, then the new instances. Moved
        instances are taken off their hosts before any is added, so swaps fit."""
        actions: List[Action] = []
        moved = []
        for h in list(plan.hosts.values()):
            for iid, o in list(h.instances):
                target = placement.get(iid)
                if target is not None and target != h.id:
                    moved.append((iid, o, h.id, target))
        for iid, _o, host, _ in moved:
            plan._take(host, iid)
        for iid, o, host, target in moved:
            plan._add(o, target)
            actions.append(Migrate(o, iid, host, target, reason))
        for name, o in names:
            host = placement[name]
            plan.place(o, host)
            actions.append(ScaleUp(o, host, reason))
        return actions


@register_placement("odp", OdpPlacementConfig, key="odp")
def _make(params: OdpPlacementConfig, shared: PlacementChoice) -> Placement:
    return OdpPlacement(params, shared.pins)
