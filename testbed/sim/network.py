"""Queues and service of the simulated topology: the fast cohort model.

A queue holds *cohorts*: `count` items sent `delta` seconds apart from `send0` on, each arriving one
broker hop later. An operator type has `c` service slots (instances × items in parallel), each with
the time it is next free. Items go FIFO to the earliest free slot; with the mean service time s and
arrivals that never go backwards, item j of a cohort lands on slot j mod c in round j div c, and its
start time has a closed form per slot (the maximum of two lines):

    S(k, r) = max(free_k + r·s, a0 + k·delta + r·max(c·delta, s))

so a whole cohort is served in O(c) arithmetic, and with a deterministic service time every item's
start is exactly the per-item FIFO schedule. Service variability enters each sampled item's own
service time (not the queue's progress). Approximation: the outputs of one step leave evenly spread
between its first and last finish, so the burst structure of a wide upstream (many slots finishing
together) is smoothed; an operator behind one waits less than in the exact model.
`testbed.sim.exact` is the per-item reference model that validates this one
(tests/unit/test_cohort_vs_exact.py).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Sequence

from testbed.sim.flows import FlowCounters
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology


@dataclass
class Cohort:
    count: int
    send0: float  # send time of the first item (s)
    delta: float  # spacing between items (s)
    origin0: float  # when the first item's source emitted what it derives from (end-to-end latency)
    origin_delta: float  # spacing of the origins


class CohortQueue:
    """One operator type: FIFO cohorts, service slots, output accumulator."""

    __slots__ = ("name", "index", "cohorts", "waiting", "free", "selectivity", "owed", "outputs", "processed", "sink")

    def __init__(self, name: str, index: int, selectivity: float):
        self.name = name
        self.index = index
        self.cohorts: Deque[Cohort] = deque()
        self.waiting = 0
        self.free: List[float] = []  # next free time per slot, ascending
        self.selectivity = selectivity
        self.owed = 0.0  # fractional outputs carried over (e.g. one report per 300 inputs)
        self.outputs: List["CohortQueue"] = []
        self.processed = 0
        self.sink = False  # no downstream operator: items end here (latency samples)

    def set_slots(self, slots: int, t: float) -> None:
        """New slots are free now; removed slots are the busiest (their items still finish)."""
        free = self.free
        if slots > len(free):
            free[:0] = [t] * (slots - len(free))
        elif slots < len(free):
            del free[slots:]
        free.sort()


class CohortNetwork:
    def __init__(self, topology: Topology, hop_s: float, recorder: SampleRecorder):
        self.topology = topology
        self.hop_s = hop_s
        self.recorder = recorder
        self.flows = FlowCounters(topology.operators, topology.edges)
        self.queues: Dict[str, CohortQueue] = {
            o: CohortQueue(o, k, topology.selectivity[o]) for k, o in enumerate(topology.operators)
        }
        for o, q in self.queues.items():
            q.outputs = [self.queues[d] for d in topology.downstream[o]]
            q.sink = not q.outputs
        self._order = [self.queues[o] for o in topology.operators]

    def send(self, source: str, operator: str, t: float, count: int) -> None:
        """Items a source emits at t (their origin)."""
        if count > 0:
            q = self.queues[operator]
            q.cohorts.append(Cohort(count, t, 0.0, t, 0.0))
            q.waiting += count
            self.flows.send(source, operator, count)

    def purge(self, t: float) -> Dict[str, int]:
        """Drop everything waiting (a restart with purge); the items per operator."""
        dropped = {}
        for q in self._order:
            dropped[q.name] = q.waiting
            self.flows.drop(q.name, "purge", q.waiting)
            q.cohorts.clear()
            q.waiting = 0
        return dropped

    def depth(self, operator: str) -> int:
        return self.queues[operator].waiting

    def processed(self, operator: str) -> int:
        return self.queues[operator].processed

    def advance(self, t0: float, t1: float, slots: Dict[str, int], service_s: Dict[str, float],
                instances: Dict[str, Sequence[str]]) -> None:
        """Serve every operator (upstream first) for the step [t0, t1)."""
        for q in self._order:
            q.set_slots(slots[q.name], t0)
            if q.free and q.cohorts:
                self._serve(q, t0, t1, service_s[q.name], instances[q.name])

    def _serve(self, q: CohortQueue, t0: float, t1: float, s: float, instances: Sequence[str]) -> None:
        hop = self.hop_s
        free = [f if f > t0 else t0 for f in q.free]  # an idle slot is free from the step's start
        c = len(free)
        recorder = self.recorder
        first_finish = last_finish = -1.0
        origin_first = origin_last = 0.0
        started = 0
        cohorts = q.cohorts
        while cohorts:
            co = cohorts[0]
            a0 = co.send0 + hop
            if a0 >= t1:
                break
            d = co.delta
            h = c * d if c * d > s else s  # per-slot spacing of arrivals vs service
            rounds = []
            k_items = 0
            for k in range(c):
                b = a0 + k * d
                r_cap = math.ceil((t1 - free[k]) / s) if t1 > free[k] else 0
                r_arr = math.ceil((t1 - b) / h) if t1 > b else 0
                r_max = (co.count - k + c - 1) // c
                r = min(r_cap, r_arr, r_max)
                rounds.append(r)
                k_items += r
            if k_items == 0:
                break
            # FIFO prefix: slot k took rounds[k]; round-robin order makes these the first k_items.
            base = recorder.take(q.index, k_items)
            for j in base:
                k, r = j % c, j // c
                fk = free[k] + r * s
                bk = a0 + k * d + r * h
                start = fk if fk > bk else bk
                finish = start + recorder.service(q.index, s)
                recorder.record_finished(q.index, instances, co.send0 + j * d, finish)
                if q.sink:
                    self.flows.latency(finish, q.name, finish - (co.origin0 + j * co.origin_delta))
            if started == 0:
                origin_first = co.origin0
            origin_last = co.origin0 + (k_items - 1) * co.origin_delta
            # Start of the first and last item give the span of outputs.
            j_last = k_items - 1
            k, r = j_last % c, j_last // c
            s_last = max(free[k] + r * s, a0 + k * d + r * h)
            s_first = max(free[0], a0)
            if first_finish < 0:
                first_finish = s_first + s
            last_finish = s_last + s
            # Advance each slot past its rounds; the next item goes to slot k_items mod c.
            for k in range(c):
                r = rounds[k]
                if r:
                    free[k] = max(free[k] + (r - 1) * s, a0 + k * d + (r - 1) * h) + s
            shift = k_items % c
            if shift:
                free = free[shift:] + free[:shift]
            started += k_items
            co.count -= k_items
            co.send0 += k_items * d
            co.origin0 += k_items * co.origin_delta
            if co.count == 0:
                cohorts.popleft()
            else:
                break  # the rest of this cohort cannot start before t1
        q.free = sorted(free)
        if started:
            q.waiting -= started
            q.processed += started
            self.flows.serve(q.name, instances, started, started * s)
            self._emit(q, started, first_finish, last_finish, origin_first, origin_last)

    def _emit(self, q: CohortQueue, started: int, first_finish: float, last_finish: float,
              origin_first: float, origin_last: float) -> None:
        """Outputs of one step leave spread evenly between the first and the last finish; their
        origins spread likewise between those of the first and the last item started."""
        if not q.outputs:
            return
        total = q.owed + started * q.selectivity
        out = int(total)
        q.owed = total - out
        if out == 0:
            return
        delta = (last_finish - first_finish) / (out - 1) if out > 1 else 0.0
        origin_delta = (origin_last - origin_first) / (out - 1) if out > 1 else 0.0
        for d in q.outputs:
            d.cohorts.append(Cohort(out, first_finish, delta, origin_first, origin_delta))
            d.waiting += out
            self.flows.send(q.name, d.name, out)
