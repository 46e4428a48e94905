"""The per-item model with an emulated network (`backend.emulation.enabled`; spec odp.md §15.2,
docs/papers/odp.md#delay-and-availability-emulation).

It differs from `testbed.sim.exact` in one respect that the emulation needs: every instance has
its own queue. The sender of an item picks the receiving instance (each sender -- an instance, or
the provider per source -- goes round the operator's serving instances on its own, like Storm's
shuffle grouping per task; every sender-receiver pair then carries an equal share of the edge's
rate, as the ODP model's even split assumes), so the item's path through the hosts is known: a hop between two
hosts adds a draw of d(u, v) to the broker hop, and in `tuple` mode loses the item with probability 1 - A_uv; an
item reaching a host is lost with probability 1 - A_u (`outage` mode: when the host is down).
Losses are counted as dropped with reason `unavailable`. The data provider sends from
`backend.emulation.provider_host`.

When an operator's instances change, the items queued at instances that went are handed to the
remaining ones in rotation, keeping their arrival times (they are already in flight); items sent
while an operator has no instance wait for its first one.
"""
from __future__ import annotations

import heapq
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from testbed.emulation import Emulator
from testbed.sim.exact import ExactNetwork, _ExactQueue
from testbed.sim.incidents import IncidentProcess
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology

UNAVAILABLE = "unavailable"

Item = Tuple[float, int, float, float, str]  # (arrival, sequence, send, origin, sender host)


class EmulatedNetwork(ExactNetwork):
    def __init__(self, topology: Topology, hop_s: float, recorder: SampleRecorder, emulator: Emulator,
                 provider_host: str, incidents: Optional[IncidentProcess] = None):
        super().__init__(topology, hop_s, recorder, incidents)
        self.emulator = emulator
        self.provider_host = provider_host
        self.hosts: Dict[str, str] = {}  # instance -> host
        self.members: Dict[str, List[str]] = {o: [] for o in topology.operators}  # serving instances
        self.inbox: Dict[str, List[Item]] = {}  # instance -> heap of items by arrival
        self.free: Dict[str, List[float]] = {}  # instance -> heap of its slots' free times
        self.pending: Dict[str, List[Tuple[float, float, str]]] = {o: [] for o in topology.operators}
        self.rr: Dict[Tuple[str, str], int] = {}  # (sender, operator) -> items it sent there
        self._seq = 0

    def set_hosts(self, hosts: Mapping[str, str]) -> None:
        """Where every instance runs (called whenever the cluster changed). Hosts of instances that
        went are kept: items sent before the next step's reconciliation may still name them."""
        self.hosts.update(hosts)

    # -- items in ------------------------------------------------------------------------------
    def send(self, source: str, operator: str, t: float, count: int) -> None:
        t_in = self._entry(source, operator, t, count)  # a restart's downtime at the sources (as exact.py)
        if t_in is None:
            return
        self.flows.send(source, operator, count)
        self._dispatch(self.queues[operator], t_in, t_in, self.provider_host, count, source)

    def _dispatch(self, q: _ExactQueue, send: float, origin: float, sender: str, count: int, key: str) -> None:
        """`count` items from the sender `key` (on host `sender`) to the operator's instances in turn."""
        members = self.members[q.name]
        for _ in range(count):
            if not members:
                self.pending[q.name].append((send, origin, sender))
                continue
            turn = self.rr.get((key, q.name), 0)
            self.rr[(key, q.name)] = turn + 1
            self._enqueue(q, members[turn % len(members)], send, origin, sender)

    def _enqueue(self, q: _ExactQueue, instance: str, send: float, origin: float, sender: str) -> None:
        emu, host = self.emulator, self.hosts[instance]
        arrival = send + self.hop_s
        if sender != host:
            if emu.hop_lost(sender, host):
                self.flows.drop(q.name, UNAVAILABLE, 1)
                return
            arrival += emu.delay_s(sender, host)
        if emu.host_lost(host, arrival):
            self.flows.drop(q.name, UNAVAILABLE, 1)
            return
        self._seq += 1
        heapq.heappush(self.inbox[instance], (arrival, self._seq, send, origin, sender))

    # -- queries -------------------------------------------------------------------------------
    def depth(self, operator: str) -> int:
        return sum(len(self.inbox[i]) for i in self.members[operator]) + len(self.pending[operator])

    def purge(self, t: float, keep: Collection[str] = ()) -> Dict[str, int]:
        dropped = {}
        for q in self._order:
            if q.name in keep:
                continue
            n = self.depth(q.name)
            for i in self.members[q.name]:
                self.inbox[i].clear()
            self.pending[q.name].clear()
            dropped[q.name] = n
            self.flows.drop(q.name, "purge", n)
        return dropped

    # -- serving -------------------------------------------------------------------------------
    def advance(self, t0: float, t1: float, slots: Dict[str, int], service_s: Dict[str, float],
                instances: Dict[str, Sequence[str]]) -> None:
        for q in self._order:
            self._reconcile(q, list(instances[q.name]), slots[q.name], t0)
            for instance in self.members[q.name]:
                self._serve_instance(q, instance, t1, service_s[q.name], instances[q.name])

    def _reconcile(self, q: _ExactQueue, now: List[str], slots: int, t0: float) -> None:
        before = self.members[q.name]
        parallel = slots // len(now) if now else 0
        if now == before and all(len(self.free[i]) == parallel for i in now):
            return
        orphans: List[Item] = []
        for i in before:
            if i not in now:
                orphans += self.inbox.pop(i)
                del self.free[i]
        for i in now:
            if i not in self.inbox:
                self.inbox[i] = []
                self.free[i] = [t0] * parallel
            elif len(self.free[i]) != parallel:
                free = sorted(self.free[i])
                free = [t0] * (parallel - len(free)) + free if parallel > len(free) else free[:parallel]
                heapq.heapify(free)
                self.free[i] = free
        self.members[q.name] = now
        if not now:
            self.pending[q.name] += [(send, origin, sender) for _, _, send, origin, sender in sorted(orphans)]
            return
        for k, item in enumerate(sorted(orphans)):  # already in flight: they keep their arrival
            heapq.heappush(self.inbox[now[k % len(now)]], item)
        waiting, self.pending[q.name] = self.pending[q.name], []
        for send, origin, sender in waiting:
            self._dispatch(q, send, origin, sender, 1, f"pending@{sender}")

    def _serve_instance(self, q: _ExactQueue, instance: str, t1: float, s: float, instances: Sequence[str]) -> None:
        free, host = self.free[instance], self.hosts[instance]
        if not free:
            return

        def forward(finish: float, origin: float, out: int) -> None:
            for d in q.outputs:
                self.flows.send(q.name, d.name, out)
                self._dispatch(d, finish, origin, host, out, instance)

        started, busy = self._serve_items(q, _Inbox(self.inbox[instance]), free, t1, s, instances, forward)
        self.flows.serve(q.name, [instance], started, busy)


class _Inbox:
    """One instance's queue: a heap of items by arrival (the hop and the emulated delay included)."""

    __slots__ = ("heap",)

    def __init__(self, heap: List[Item]):
        self.heap = heap

    def head(self) -> Optional[Tuple[float, float, float]]:
        if not self.heap:
            return None
        arrival, _, send, origin, _ = self.heap[0]
        return arrival, send, origin

    def pop(self) -> None:
        heapq.heappop(self.heap)
