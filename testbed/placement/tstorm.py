"""A T-Storm-like traffic-aware placement (Xu et al., ICDCS 2014), as ODP's §7.2 compares it
(docs/papers/odp.md#heuristics-against-odp): new instances go round robin over the offered hosts;
`tstorm_first_s` into the run, and then every `tstorm_period_s`, all instances are reassigned by
best fit in decreasing order of traffic:

* the traffic of an instance is the measured rate of its operator's in- and out-edges, split
  evenly among the instances at both ends (as ODP's model splits it);
* instances are taken by decreasing traffic (ties: start order); each goes to the host with room
  that adds the least inter-host traffic towards the instances already assigned (and the data
  provider, on `backend.emulation.provider_host`); ties go to the host with the least room left
  (best fit), then to the earlier-leased host;
* operators named in `placement.pins` stay on their host;
* Decision: the new assignment is carried out only if it lowers the inter-host traffic (the greedy's
  ties otherwise move instances back and forth every period without any gain).

Like Storm's default scheduler and T-Storm, it knows nothing of delays or availabilities. Every
reassignment is recorded in `runs` (its inter-host traffic before and after).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from testbed.model import NEW_HOST_PREFIX, Action, Migrate, OperatorType
from testbed.placement.base import Placement, PlacementChoice, PlacementParams, register_placement
from testbed.plan import Plan

PROVIDER = "<provider>"


@dataclass(frozen=True)
class Reassignment:
    t_s: float
    traffic_before: float  # items/s between hosts under the current assignment
    traffic_after: float
    moved: int


@dataclass
class TStormParams(PlacementParams):
    """`placement.tstorm_first_s`, `placement.tstorm_period_s`."""

    tstorm_first_s: float = 100.0  # the best-fit reassignment after the round-robin start
    tstorm_period_s: float = 300.0  # and again every this many seconds (0: once)

    def validate(self) -> Optional[Tuple[str, str]]:
        for name in ("tstorm_first_s", "tstorm_period_s"):
            if getattr(self, name) < 0:
                return name, "must be >= 0"
        return None


class TStorm(Placement):
    name = "tstorm"

    def __init__(self, params: TStormParams, pins: Dict[str, str]):
        self.pins = dict(pins)
        self.first_s = params.tstorm_first_s
        self.period_s = params.tstorm_period_s
        self.next_s: Optional[float] = params.tstorm_first_s
        self.provider_host = "vm1"
        self.rr = 0
        self.reassignments: List[Reassignment] = []

    def bind_run(self, run_cfg: Any) -> None:
        self.provider_host = run_cfg.backend.emulation.provider_host

    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        pin = self.pins.get(op.name)
        if pin is not None and pin in plan.hosts and plan.hosts[pin].fits(op):
            return pin
        hosts = [h for h in plan.candidate_hosts()]
        for k in range(len(hosts)):
            host = hosts[(self.rr + k) % len(hosts)]
            if host.fits(op):
                self.rr = (self.rr + k + 1) % len(hosts)
                return host.id
        return None

    def moves(self, plan: Plan) -> List[Action]:
        if self.next_s is None or plan.t < self.next_s:
            return []
        self.next_s = plan.t + self.period_s if self.period_s > 0 else None
        pairs = pair_traffic(plan)
        if not pairs:
            return []
        current = {iid: h.id for h in plan.hosts.values() for iid, _ in h.instances}
        target = self.best_fit(plan, pairs)
        before, after = inter_host(pairs, current, self.provider_host), inter_host(pairs, target, self.provider_host)
        moved = [(iid, o, h.id, target[iid]) for h in plan.hosts.values() for iid, o in h.instances
                 if target.get(iid, h.id) != h.id]
        if after >= before - 1e-9:
            moved = []
        self.reassignments.append(Reassignment(plan.t, before, after, len(moved)))
        reason = (f"tstorm reassignment {len(self.reassignments)}: best fit in decreasing traffic order, "
                  f"inter-host traffic {before:.2f} -> {after:.2f} items/s")
        for iid, _o, host, _ in moved:
            plan._take(host, iid)
        actions: List[Action] = []
        for iid, o, host, to in moved:
            plan._add(o, to)
            actions.append(Migrate(o, iid, host, to, reason))
        return actions

    def best_fit(self, plan: Plan, pairs: Dict[Tuple[str, str], float]) -> Dict[str, str]:
        operator_of = {iid: o for h in plan.hosts.values() for iid, o in h.instances}
        load: Dict[str, float] = {}
        for (a, b), rate in pairs.items():
            load[a] = load.get(a, 0.0) + rate
            load[b] = load.get(b, 0.0) + rate
        hosts = [h for h in plan.candidate_hosts()]
        free = {h.id: [h.cpu, h.memory] for h in hosts}
        assigned: Dict[str, str] = {PROVIDER: self.provider_host}
        order = sorted(operator_of, key=lambda i: (-load.get(i, 0.0), plan.order[i]))
        pinned = [i for i in order if self.pins.get(operator_of[i]) in free or i.startswith(NEW_HOST_PREFIX)]
        current = {iid: h.id for h in plan.hosts.values() for iid, _ in h.instances}
        for i in pinned:
            host = self.pins.get(operator_of[i]) if not i.startswith(NEW_HOST_PREFIX) else current[i]
            assert host is not None  # a pinned host is one of the free ones
            if host in free:
                self._take(free, host, plan.types[operator_of[i]])
            assigned[i] = host
        neighbours: Dict[str, List[Tuple[str, float]]] = {}
        for (a, b), rate in pairs.items():
            neighbours.setdefault(a, []).append((b, rate))
            neighbours.setdefault(b, []).append((a, rate))
        for i in order:
            if i in assigned:
                continue
            op = plan.types[operator_of[i]]
            best = None
            for k, h in enumerate(hosts):
                room = free[h.id]
                if room[0] < op.cpu or room[1] < op.memory:
                    continue
                added = sum(rate for j, rate in neighbours.get(i, ()) if j in assigned and assigned[j] != h.id)
                key = (added, room[0] - op.cpu, k)
                if best is None or key < best[0]:
                    best = (key, h.id)
            host = best[1] if best is not None else current[i]
            if best is not None:
                self._take(free, host, op)
            assigned[i] = host
        del assigned[PROVIDER]
        return assigned

    @staticmethod
    def _take(free: Dict[str, List[int]], host: str, op: OperatorType) -> None:
        free[host][0] -= op.cpu
        free[host][1] -= op.memory


def pair_traffic(plan: Plan) -> Dict[Tuple[str, str], float]:
    """Items/s between instance pairs (the provider as PROVIDER): each topology edge's measured rate
    split evenly over its instance pairs."""
    snap = plan.snapshot
    members: Dict[str, List[str]] = {}
    for h in plan.hosts.values():
        for iid, o in h.instances:
            members.setdefault(o, []).append(iid)
    out: Dict[Tuple[str, str], float] = {}
    for a, b in snap.edges:
        rate = snap.edge_items.get((a, b), 0) / snap.monitoring_s
        senders = members.get(a, []) if a in plan.types else [PROVIDER]
        receivers = members.get(b, [])
        if rate <= 0 or not senders or not receivers:
            continue
        share = rate / (len(senders) * len(receivers))
        for u in senders:
            for v in receivers:
                out[(u, v)] = out.get((u, v), 0.0) + share
    return out


def inter_host(pairs: Dict[Tuple[str, str], float], hosts: Dict[str, str], provider_host: str) -> float:
    where = dict(hosts)
    where[PROVIDER] = provider_host
    return sum(rate for (a, b), rate in pairs.items() if where.get(a) != where.get(b))


@register_placement("tstorm", TStormParams)
def _make(params: TStormParams, shared: PlacementChoice) -> Placement:
    return TStorm(params, shared.pins)
