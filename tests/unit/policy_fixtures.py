"""A small, readable builder for policy snapshots (docs/papers/btu-provisioning.md#what-a-policy-sees),
shared by the policy unit tests.

    w = World(t=1000.0, btu_s=600.0)
    w.op("A", cpu=512, memory=1024, slo_ms=1000, queue=0, durations=(100,))
    w.host("h1", "A", "A", btu_end=1050.0)        # two instances of A: ids a1, a2
    snap = w.snapshot()

A host's free CPU / memory is its total minus the reservations of its non-draining instances, as
docs/papers/btu-provisioning.md#what-a-policy-sees defines cpu* and memory*; an operator's `n` is
the number of its non-draining instances unless given explicitly. Hosts are leased in the order they
are declared, instances started in the order they are declared (so the last declared instance of a
type is the newest one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from testbed.model import (
    HostView,
    InstanceState,
    InstanceView,
    OperatorType,
    OperatorView,
    Snapshot,
)
from testbed.plan import PlanHost


@dataclass
class _Op:
    type: OperatorType
    queue: int
    durations: Tuple[float, ...]
    scalings: int
    n: Optional[int]


@dataclass
class _Host:
    id: str
    cpu: int
    memory: int
    leased_at: float
    btu_end: float
    images: frozenset
    releasing: bool
    ready: bool
    cost: float


@dataclass
class World:
    t: float = 1000.0
    btu_s: float = 3600.0
    reasoning_s: float = 60.0
    penalty: float = 0.0001
    max_hosts: int = 10
    host_cpu: int = 4096
    host_memory: int = 7168
    input_rate: float = 100.0
    _ops: Dict[str, _Op] = field(default_factory=dict)
    _hosts: List[_Host] = field(default_factory=list)
    _instances: List[InstanceView] = field(default_factory=list)
    _counter: Dict[str, int] = field(default_factory=dict)

    def op(
        self,
        name: str,
        cpu: int = 512,
        memory: int = 1024,
        slo_ms: float = 1000.0,
        queue: int = 0,
        durations: Sequence[float] = (),
        scalings: int = 0,
        n: Optional[int] = None,
    ) -> "World":
        self._ops[name] = _Op(OperatorType(name, slo_ms, cpu, memory, image_mb=68), queue, tuple(durations),
                              scalings, n)
        return self

    def host(
        self,
        host_id: str,
        *operators: str,
        btu_end: Optional[float] = None,
        cpu: Optional[int] = None,
        memory: Optional[int] = None,
        images: Sequence[str] = (),
        releasing: bool = False,
        leased_at: Optional[float] = None,
    ) -> List[str]:
        """Declare a host holding one running instance per name in `operators`; returns their ids.
        By default the host's BTU ends far outside any release window (t + BTU / 2)."""
        self._hosts.append(
            _Host(
                id=host_id,
                cpu=self.host_cpu if cpu is None else cpu,
                memory=self.host_memory if memory is None else memory,
                leased_at=float(len(self._hosts)) if leased_at is None else leased_at,
                btu_end=self.t + self.btu_s / 2 if btu_end is None else btu_end,
                images=frozenset(images) | frozenset(operators),
                releasing=releasing,
                ready=True,
                cost=1.0,
            )
        )
        return [self.instance(host_id, o) for o in operators]

    def instance(self, host_id: str, operator: str, state: InstanceState = InstanceState.running) -> str:
        k = self._counter.get(operator, 0) + 1
        self._counter[operator] = k
        iid = f"{operator.lower()}{k}"
        self._instances.append(InstanceView(iid, operator, host_id, state, started_at=float(len(self._instances))))
        return iid

    def snapshot(self) -> Snapshot:
        live = [i for i in self._instances if i.state != InstanceState.draining]
        hosts = []
        for h in self._hosts:
            mine = [self._ops[i.operator].type for i in live if i.host == h.id]
            hosts.append(
                HostView(
                    id=h.id, cpu=h.cpu, memory=h.memory,
                    cpu_free=h.cpu - sum(o.cpu for o in mine),
                    memory_free=h.memory - sum(o.memory for o in mine),
                    leased_at=h.leased_at, btu_end=h.btu_end, images=h.images, ready=h.ready,
                    cost=h.cost, releasing=h.releasing,
                )
            )
        operators = {
            name: OperatorView(
                type=o.type,
                n=sum(1 for i in live if i.operator == name) if o.n is None else o.n,
                queue=o.queue,
                durations=o.durations,
                scalings=o.scalings,
            )
            for name, o in self._ops.items()
        }
        return Snapshot(
            t=self.t, operators=operators, hosts=tuple(hosts), instances=tuple(self._instances),
            btu_s=self.btu_s, reasoning_s=self.reasoning_s, penalty=self.penalty,
            input_rate=self.input_rate, max_hosts=self.max_hosts,
            host_cpu=self.host_cpu, host_memory=self.host_memory,
        )


def plan_host(cpu: int, memory: int, cpu_free: int, memory_free: int, images: Sequence[str] = ()) -> PlanHost:
    """A bare host for Algorithm 2."""
    return PlanHost(id="h", cpu=cpu, memory=memory, cpu_free=cpu_free, memory_free=memory_free,
                    btu_end=0.0, images=set(images))


def kinds(actions) -> List[str]:
    return [a.kind for a in actions]
