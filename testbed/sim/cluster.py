"""Simulated hosts and containers: executes a policy's actions with the delays of a cloud (VM lease,
image pull, container start) and keeps the BTU accounting of every lease."""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from testbed.actions import ActionRecord, dispatch
from testbed.config import InfrastructureConfig
from testbed.leasing import Host, leases_table
from testbed.model import Action, HostView, InstanceState, InstanceView
from testbed.topology import Topology


@dataclass
class SimInstance:
    id: str
    operator: str
    host: str
    requested_at: float
    ready_at: float
    state: InstanceState = InstanceState.starting
    replaces: Optional[str] = None  # migration: the old copy, stopped once this one runs
    replaced: bool = False  # a migration source: still serving, no longer counted or reserved
    active: bool = True  # an inactive pool member is started but consumes nothing


SimHost = Host  # the lease bookkeeping is shared with the live host pool (testbed/leasing.py)


class SimCluster:
    """Executes actions (it is the simulator's `testbed.actions.ActionTarget`). `purge` empties the
    operators' queues for a restart and returns the items dropped per operator (the network's)."""

    def __init__(self, topology: Topology, infra: InfrastructureConfig, btu_s: float, price_per_btu: float,
                 rng: np.random.Generator, purge: Callable[..., Mapping[str, int]] = lambda t, keep=(): {},
                 sources: Callable[[float, float, str], None] = lambda t, until, mode: None):
        self.topology = topology
        self.infra = infra
        self.btu_s = btu_s
        self.price = price_per_btu
        self.rng = rng
        self.hosts: Dict[str, SimHost] = {}
        self.retired: List[SimHost] = []
        self.instances: Dict[str, SimInstance] = {}
        self.scalings: Dict[str, int] = {o: 0 for o in topology.operators}
        self.records: List[ActionRecord] = []
        self.version = 0  # bumped whenever serving capacity changes
        self._events: List[Tuple[float, int, str, str]] = []  # (time, seq, kind, id)
        self._seq = 0
        self._host_seq = 0
        self._instance_seq = 0
        self.purge = purge
        self.sources = sources  # the network's: a restart's downtime at the sources (Restart.source)
        self.paused = False  # a restart's downtime: nothing serves

    # -- time ------------------------------------------------------------------------------
    def process_events(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            when, _, kind, ident = heapq.heappop(self._events)
            if kind == "ready":
                self._instance_ready(when, ident)
            elif kind == "release_deadline":
                self._release_deadline(when, ident)
            elif kind == "resume":
                self.paused = False
                self.version += 1

    def next_event(self) -> float:
        """When `process_events` next has something to do (inf: nothing scheduled)."""
        return self._events[0][0] if self._events else float("inf")

    def _at(self, when: float, kind: str, ident: str) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, ident))

    def _instance_ready(self, t: float, ident: str) -> None:
        inst = self.instances.get(ident)
        if inst is None or inst.state != InstanceState.starting:
            return
        inst.state = InstanceState.running
        self.version += 1
        if inst.replaces and inst.replaces in self.instances:
            self._stop(t, inst.replaces)

    def _release_deadline(self, t: float, host_id: str) -> None:
        host = self.hosts.get(host_id)
        if host is None:
            return
        for ident in list(host.instances):  # copies not yet replaced stop at the paid time's end
            self._stop(t, ident)
        self._release(t, host)

    # -- actions (testbed.actions.ActionTarget) ---------------------------------------------
    def apply(self, t: float, actions: Sequence[Action], immediate: bool = False) -> None:
        """Execute actions in order. `immediate` deploys without delays (the initial deployment)."""
        dispatch(t, actions, self, self.records, self.scalings, immediate)

    def lease(self, t: float, immediate: bool) -> str:
        return self._lease(t, immediate).id

    def start(self, t: float, operator: str, host: str, immediate: bool) -> str:
        return self._start(t, operator, host, immediate).id

    def stop(self, t: float, instance: str) -> None:
        self._stop(t, instance)

    def migrate(self, t: float, operator: str, instance: str, target: str, immediate: bool) -> str:
        old = self.instances[instance]
        old.replaced = True
        new = self._start(t, operator, target, immediate)
        new.replaces = old.id
        return new.id

    def prolong(self, t: float, host: str) -> None:
        self.hosts[host].prolong(self.btu_s)

    def release(self, t: float, host_id: str) -> None:
        host = self.hosts[host_id]
        host.releasing = True
        if not host.instances:
            self._release(t, host)
        else:
            self._at(max(t, host.btu_end), "release_deadline", host.id)

    def set_active(self, t: float, operator: str, active: int) -> Dict[str, bool]:
        """The oldest instances are the active ones: switching on takes the oldest inactive, switching
        off the newest active."""
        pool = [i for i in self.instances.values() if i.operator == operator and not i.replaced]  # start order
        on = [i for i in pool if i.active]
        if active > len(on):
            switched = [i for i in pool if not i.active][: active - len(on)]
        else:
            switched = on[max(active, 0):]
        for inst in switched:
            inst.active = not inst.active
        if switched:
            self.version += 1
        return {i.id: i.active for i in switched}

    def restart(self, t: float, downtime_s: float, purge: bool, purge_entry: bool = True) -> Dict[str, int]:
        self.paused = True
        self.version += 1
        self._at(t + downtime_s, "resume", "")
        if not purge:
            return {}
        keep = () if purge_entry else {d for s in self.topology.sources for d in s.downstream}
        return dict(self.purge(t, keep))

    def source_downtime(self, t: float, until: float, mode: str) -> None:
        """The sources' arrivals in [t, until) held, dropped or paused (`mode`, Restart.source)."""
        self.sources(t, until, mode)

    def _uniform(self, bounds: Sequence[float]) -> float:
        return float(self.rng.uniform(bounds[0], bounds[1]))

    def _lease(self, t: float, immediate: bool) -> SimHost:
        self._host_seq += 1
        ready = t if immediate else t + self._uniform(self.infra.lease_delay_s)
        host = SimHost(f"vm{self._host_seq}", self.infra.host_cpu_shares, self.infra.host_memory_mb, t, ready,
                       t + self.btu_s)
        self.hosts[host.id] = host
        return host

    def _start(self, t: float, operator: str, host_id: str, immediate: bool) -> SimInstance:
        host = self.hosts[host_id]
        self._instance_seq += 1
        ident = f"{operator}-{self._instance_seq}"
        if immediate:
            ready = t
            host.images.setdefault(operator, t)
        else:
            pull_s = self.topology.types[operator].image_mb / self.infra.pull_mb_per_s
            ready = host.image_ready(operator, max(t, host.ready_at),
                                     pull_s) + self._uniform(self.infra.container_start_s)
        inst = SimInstance(ident, operator, host.id, t, ready)
        self.instances[ident] = inst
        host.instances.append(ident)
        if immediate:
            inst.state = InstanceState.running
            self.version += 1
        else:
            self._at(ready, "ready", ident)
        return inst

    def _stop(self, t: float, ident: str) -> None:
        """Graceful stop: in the fluid model the items an instance holds are already accounted."""
        inst = self.instances.pop(ident)
        host = self.hosts[inst.host]
        host.instances.remove(ident)
        self.version += 1
        if host.releasing and not host.instances:
            self._release(t, host)

    def _release(self, t: float, host: SimHost) -> None:
        if host.release(t):
            del self.hosts[host.id]
            self.retired.append(host)

    # -- views -----------------------------------------------------------------------------
    def serving(self) -> Dict[str, List[SimInstance]]:
        """Instances processing items, per operator type, in start order (migration sources until
        replaced; none during a restart's downtime; inactive pool members never)."""
        out: Dict[str, List[SimInstance]] = {o: [] for o in self.topology.operators}
        if self.paused:
            return out
        for inst in self.instances.values():
            if inst.state == InstanceState.running and inst.active:
                out[inst.operator].append(inst)
        return out

    def counted(self, operator: str) -> int:
        return sum(1 for i in self.instances.values() if i.operator == operator and not i.replaced)

    def host_views(self, t: float) -> Tuple[HostView, ...]:
        types = self.topology.types
        return tuple(
            h.view(t, (types[self.instances[i].operator] for i in h.instances if not self.instances[i].replaced),
                   self.price)
            for h in self.hosts.values()
        )

    def instance_views(self) -> Tuple[InstanceView, ...]:
        return tuple(
            InstanceView(i.id, i.operator, i.host, InstanceState.draining if i.replaced else i.state, i.requested_at,
                         active=i.active)
            for i in self.instances.values()
        )

    def leases(self, end_s: float) -> Dict[str, list]:
        """The `leases` table. Paid BTUs include prolongations paid in advance of the run's end."""
        return leases_table(self.retired + list(self.hosts.values()), self.btu_s, end_s)
