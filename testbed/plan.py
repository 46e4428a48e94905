"""A policy's scratch copy of the system for one reasoning cycle.

Decisions taken earlier in a cycle (an instance placed, a host leased) must be visible to the
decisions after them, and a release plan must be simulated before anything is committed. `Plan`
is that mutable working copy; it is created from a snapshot, lives inside one `decide()` call and
never touches the outside world.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from testbed.model import NEW_HOST_PREFIX, InstanceState, OperatorType, Snapshot


@dataclass
class PlanHost:
    id: str
    cpu: int
    memory: int
    cpu_free: int
    memory_free: int
    btu_end: float
    images: set[str]
    instances: List[Tuple[str, str]] = field(default_factory=list)  # (instance id, operator)
    excluded: bool = False  # being released: no placements

    def fits(self, op: OperatorType) -> bool:
        return self.cpu_free >= op.cpu and self.memory_free >= op.memory


class Plan:
    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot  # read-only: what a placement needs beyond the plan (ODP: rates, durations)
        self.t = snapshot.t
        self.types: Dict[str, OperatorType] = {o.name: o.type for o in snapshot.operators.values()}
        self.n: Dict[str, int] = {o.name: o.n for o in snapshot.operators.values()}
        self.scalings: Dict[str, int] = {o.name: o.scalings for o in snapshot.operators.values()}
        self.max_hosts = snapshot.max_hosts
        self.host_cpu = snapshot.host_cpu
        self.host_memory = snapshot.host_memory
        self.btu_s = snapshot.btu_s
        # Hosts in lease order: first fit and tie-breaks follow it, deterministically.
        self.hosts: Dict[str, PlanHost] = {}
        for h in sorted(snapshot.hosts, key=lambda h: (h.leased_at, h.id)):
            self.hosts[h.id] = PlanHost(
                id=h.id, cpu=h.cpu, memory=h.memory, cpu_free=h.cpu_free, memory_free=h.memory_free,
                btu_end=h.btu_end, images=set(h.images), excluded=h.releasing,
            )
        self.order: Dict[str, int] = {}  # instance id -> start order, for "newest first"
        for inst in sorted(snapshot.instances, key=lambda i: (i.started_at, i.id)):
            if inst.state != InstanceState.draining and inst.host in self.hosts:
                self.hosts[inst.host].instances.append((inst.id, inst.operator))
                self.order[inst.id] = len(self.order)
        self._leased = 0

    def copy(self) -> "Plan":
        return copy.deepcopy(self, {id(self.snapshot): self.snapshot})  # the snapshot is immutable: shared

    def candidate_hosts(self) -> Iterable[PlanHost]:
        return (h for h in self.hosts.values() if not h.excluded)

    def place(self, operator: str, host_id: str) -> str:
        """Reserve room for a new instance (a scale-up); returns a placeholder instance id."""
        self.n[operator] += 1
        self.scalings[operator] += 1
        return self._add(operator, host_id)

    def remove(self, host_id: str, instance_id: str) -> str:
        """Free an instance's room (a scale-down); returns its operator type."""
        operator = self._take(host_id, instance_id)
        self.n[operator] -= 1
        self.scalings[operator] += 1
        return operator

    def move(self, host_id: str, instance_id: str, target_id: str) -> None:
        """A migration: the type's instance count and scalings stay as they are."""
        self._add(self._take(host_id, instance_id), target_id)

    def _add(self, operator: str, host_id: str) -> str:
        op, host = self.types[operator], self.hosts[host_id]
        assert host.fits(op), f"{operator} does not fit on {host_id}"
        host.cpu_free -= op.cpu
        host.memory_free -= op.memory
        host.images.add(operator)
        ref = f"{NEW_HOST_PREFIX}instance{len(self.order)}"
        host.instances.append((ref, operator))
        self.order[ref] = len(self.order)
        return ref

    def _take(self, host_id: str, instance_id: str) -> str:
        host = self.hosts[host_id]
        for k, (iid, operator) in enumerate(host.instances):
            if iid == instance_id:
                del host.instances[k]
                host.cpu_free += self.types[operator].cpu
                host.memory_free += self.types[operator].memory
                return operator
        raise KeyError(f"{instance_id} is not on {host_id}")

    def can_lease(self) -> bool:
        return len(self.hosts) < self.max_hosts

    def lease(self) -> str:
        self._leased += 1
        ref = f"{NEW_HOST_PREFIX}host{self._leased}"
        self.hosts[ref] = PlanHost(
            id=ref, cpu=self.host_cpu, memory=self.host_memory, cpu_free=self.host_cpu,
            memory_free=self.host_memory, btu_end=self.t + self.btu_s, images=set(),
        )
        return ref

    def newest_instance(self, operator: str) -> Optional[Tuple[str, str]]:
        """(host, instance) of the most recently started instance of a type."""
        found = [(self.order[iid], h.id, iid) for h in self.hosts.values() for iid, op in h.instances if op == operator]
        return max(found)[1:] if found else None

    def empty_hosts(self) -> List[str]:
        return [h.id for h in self.hosts.values() if not h.instances and not h.excluded]

