"""The exact per-item reference model: every item queued, every slot with its own random service
times. Too slow for experiments (a 120-minute run takes several times the cohort model's time,
benchmarks/bench.py); it validates `testbed.sim.network`."""
from __future__ import annotations

import heapq
from collections import deque
from typing import Callable, Collection, Deque, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from testbed.sim.clock import SourcePause, SteppedInPython
from testbed.sim.flows import SOURCE_DROP, FlowCounters
from testbed.sim.incidents import IncidentProcess
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology


class _ExactQueue:
    def __init__(self, name: str, index: int, selectivity: float):
        self.name = name
        self.index = index
        self.items: Deque[float] = deque()  # send times, FIFO
        self.origins: Deque[float] = deque()  # the items' origins (end-to-end latency), same order
        self.free: List[float] = []  # heap of slot free times
        self.selectivity = selectivity
        self.owed = 0.0
        self.outputs: List["_ExactQueue"] = []
        self.processed = 0


class Waiting(Protocol):
    """The items waiting for a queue's slots, oldest arrival first: `head` is the first one's
    (arrival, send time, origin), None when none waits; `pop` removes it."""

    def head(self) -> Optional[Tuple[float, float, float]]: ...

    def pop(self) -> None: ...


Forward = Callable[[float, float, int], None]  # (finish, origin, count): a served item's outputs sent on


class _Fifo:
    """An operator's one queue, in send order: an item arrives one broker hop after it was sent."""

    __slots__ = ("q", "hop_s")

    def __init__(self, q: _ExactQueue, hop_s: float):
        self.q = q
        self.hop_s = hop_s

    def head(self) -> Optional[Tuple[float, float, float]]:
        if not self.q.items:
            return None
        send = self.q.items[0]
        return send + self.hop_s, send, self.q.origins[0]

    def pop(self) -> None:
        self.q.items.popleft()
        self.q.origins.popleft()


class ExactNetwork(SteppedInPython):
    def __init__(self, topology: Topology, hop_s: float, recorder: SampleRecorder,
                 incidents: Optional[IncidentProcess] = None):
        self.hop_s = hop_s
        self.timeout_s = topology.item_timeout_s  # 0: none
        self.hold_until = float("-inf")  # the sources' items emitted before this enter the topology then
        self.drop_until = float("-inf")  # the sources' items emitted before this are dropped
        self.pause = SourcePause()  # the sources' trace clock (restarts that pause it)
        self.capacity_noise: Dict[str, Union[Sequence[float], np.ndarray]] = {}  # per operator, a factor per step
        self.recorder = recorder
        self.incidents = incidents  # operators in incident mode emit by it (else by their selectivity)
        self.flows = FlowCounters(topology.operators, topology.edges)
        self.queues: Dict[str, _ExactQueue] = {
            o: _ExactQueue(o, k, topology.selectivity[o]) for k, o in enumerate(topology.operators)
        }
        for o, q in self.queues.items():
            q.outputs = [self.queues[d] for d in topology.downstream[o]]
        self._order = [self.queues[o] for o in topology.operators]

    def set_capacity_noise(self, factors: Mapping[str, Union[Sequence[float], np.ndarray]]) -> None:
        self.capacity_noise = dict(factors)

    def source_downtime(self, t: float, until: float, mode: str) -> None:
        """A restart's downtime at the sources (Restart.source): items emitted before `until` enter
        then (`hold`) or never (`drop`), or the ticks not yet emitted move by the pause (`pause`)."""
        if mode == "drop":
            self.drop_until = max(self.drop_until, until)
        elif mode == "hold":
            self.hold_until = max(self.hold_until, until)
        elif mode == "pause":
            shift, k = self.pause.stop(t, until), self.ticks_emitted
            self.tick_times[k:] = [x + shift for x in self.tick_times[k:]]

    def send(self, source: str, operator: str, t: float, count: int) -> None:
        t_in = self._entry(source, operator, t, count)
        if t_in is None:
            return
        q = self.queues[operator]
        q.items.extend([t_in] * count)
        q.origins.extend([t_in] * count)
        self.flows.send(source, operator, count)

    def _entry(self, source: str, operator: str, t: float, count: int) -> Optional[float]:
        """When items a source emits at t enter the topology; None: dropped at the door during a
        restart's downtime (received, counted as dropped, never queued)."""
        if t < self.drop_until:
            self.flows.send(source, operator, count)
            self.flows.drop(operator, SOURCE_DROP, count)
            return None
        return max(t, self.hold_until)  # held at the source during a restart's downtime

    def purge(self, t: float, keep: Collection[str] = ()) -> Dict[str, int]:
        dropped = {}
        for q in self._order:
            if q.name in keep:
                continue
            dropped[q.name] = len(q.items)
            self.flows.drop(q.name, "purge", len(q.items))
            q.items.clear()
            q.origins.clear()
        return dropped

    def depth(self, operator: str) -> int:
        return len(self.queues[operator].items)

    def processed(self, operator: str) -> int:
        return self.queues[operator].processed

    def advance(self, t0: float, t1: float, slots: Dict[str, int], service_s: Dict[str, float],
                instances: Dict[str, Sequence[str]]) -> None:
        for q in self._order:
            self._set_slots(q, slots[q.name], t0)
            if q.free:
                s = service_s[q.name]
                noise = self.capacity_noise.get(q.name)
                if noise is not None:  # the step's capacity factor (as the cohort model)
                    step = int(round(t0 / self.clock.dt))
                    s = s / noise[step] if step < len(noise) else s
                self._serve(q, t1, s, instances[q.name])

    @staticmethod
    def _set_slots(q: _ExactQueue, slots: int, t: float) -> None:
        free = sorted(q.free)
        if slots > len(free):
            free = [t] * (slots - len(free)) + free
        else:
            del free[slots:]  # the busiest slots go; their items still finish
        heapq.heapify(free)
        q.free = free

    def _serve(self, q: _ExactQueue, t1: float, s: float, instances: Sequence[str]) -> None:
        def forward(finish: float, origin: float, out: int) -> None:
            for d in q.outputs:
                # Items reach a queue in the order they were sent (finish times interleave).
                self._insert(d, finish, origin, out)
                self.flows.send(q.name, d.name, out)

        started, busy = self._serve_items(q, _Fifo(q, self.hop_s), q.free, t1, s, instances, forward)
        self.flows.serve(q.name, instances, started, busy)

    def _serve_items(self, q: _ExactQueue, waiting: Waiting, free: List[float], t1: float, s: float,
                     instances: Sequence[str], forward: Forward) -> Tuple[int, float]:
        """Serves q's waiting items, oldest arrival first, as long as a slot of `free` (not empty)
        starts one before t1; what a served item sends on goes to `forward(finish, origin, count)`.
        The items started and their busy time."""
        started, busy = 0, 0.0
        while (head := waiting.head()) is not None:
            arrival, send, origin = head
            start = max(free[0], arrival)
            if start >= t1:
                break
            waiting.pop()
            served = self._take(q, free, start, send, origin, s, instances)
            if served is None:
                continue
            service, out = served
            started += 1
            busy += service
            if out:
                forward(start + service, origin, out)
        return started, busy

    def _take(self, q: _ExactQueue, free: List[float], start: float, send: float, origin: float, s: float,
              instances: Sequence[str]) -> Optional[Tuple[float, int]]:
        """One item of q taken at `start` by the earliest free slot in `free`: None if it is older
        than the item timeout (dropped), else its service time and how many items it sends on to
        each output (selectivity, the fraction carried over to the next item; an operator in incident
        mode: 1 if the item opens an incident)."""
        if self.timeout_s > 0 and origin < start - self.timeout_s:  # too old when taken: dropped
            self.flows.drop(q.name, "timeout", 1)
            return None
        rec = self.recorder
        service = rec.service(q.index, s)
        finish = start + service
        heapq.heapreplace(free, finish)
        if rec.take(q.index, 1):
            rec.record_finished(q.index, instances, send, finish)
            if not q.outputs:
                self.flows.latency(finish, q.name, finish - origin)
        q.processed += 1
        out = 0
        if q.outputs and self.incidents is not None and self.incidents.on(q.index):
            out = self.incidents.take(q.index, 1)
        elif q.outputs:
            total = q.owed + q.selectivity
            out = int(total)
            q.owed = total - out
        return service, out

    @staticmethod
    def _insert(q: _ExactQueue, send: float, origin: float, count: int) -> None:
        if count == 0:
            return
        items = q.items
        if not items or items[-1] <= send:
            items.extend([send] * count)
            q.origins.extend([origin] * count)
            return
        # Rare: a slot finished earlier than items already forwarded; keep the queue in send order.
        pos = len(items)
        while pos > 0 and items[pos - 1] > send:
            pos -= 1
        for _ in range(count):
            items.insert(pos, send)
            q.origins.insert(pos, origin)
