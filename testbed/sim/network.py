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

Implementation: the model's state lives in numpy arrays (one row per operator, in topological
order) and the step loop is compiled by Numba (`njit`), so that a run between two moments the
simulator must act (a cloud event, a monitoring read, a reasoning cycle) is one call. The compiled
functions keep the arithmetic of the formulas above operation for operation, in the same order,
so a seed gives bit-identical event logs (tests/regression). `NUMBA_DISABLE_JIT=1` runs them as
plain Python, for debugging. A compiled step never grows an array: before each step `_room` checks
that the step fits the cohort rings, the random draws and the output buffers (bounds from what is
queued), and if not the call returns early and Python makes room.
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Collection, Dict, List, Optional, Sequence

import numpy as np
from numba import njit

from testbed.rng import DrawBuffer
from testbed.sim.clock import EPS, SourcePause, SourceTicks, StepClock
from testbed.sim.flows import SOURCE_DROP, FlowArrays
from testbed.sim.incidents import IncidentProcess
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology

# -- the compiled model's state ------------------------------------------------------------------
# Per operator k (row k): its cohorts in a ring (head, size), what it holds and did.
Queues = namedtuple("Queues", "count send0 delta origin0 origin_delta head size waiting processed owed expired")
# Per operator: the next free time of each slot (the first `slots[k]`, ascending between steps),
# the slots and instances (ids) to serve with, the mean service time; `rounds` and `rotated`
# are scratch rows of the slot width.
Slots = namedtuple("Slots", "free slots target service instances n_instances rounds rotated")
# The graph: per operator its selectivity, whether it is a sink, whether it emits per incident
# (else by its selectivity), its output edges (`out_start[k]:out_start[k+1]` into `out_op`,
# `out_edge`), the cores a busy slot uses and its mean work per item (`_shared_factor`: a slot whose
# mean time is longer, by host contention or a wait for a CPU, uses that share of its cores);
# per source edge the operator, items per machine and edge index; the ticks (time, machines) of the run.
Graph = namedtuple("Graph", "selectivity sink incident out_start out_op out_edge cpu_cores base_service "
                            "src_op src_per_machine src_edge tick_t tick_machines")
# The incident process (testbed/sim/incidents.py): per operator the inputs to skip before the next
# one that opens an incident, and a row of its geometric gaps from `pos` to `end`.
Incidents = namedtuple("Incidents", "gap draws pos end")
# The recorder's sampling state (testbed/sim/recorder.py) and the samples and latencies taken
# since Python last collected them (`taken[0]`, `taken[1]` of them).
Sampling = namedtuple("Sampling", "gap rr noise noise_pos noise_end gaps gaps_at "
                                  "t op instance duration_ms lat_t lat_op lat_ms taken")
# FlowArrays (testbed/sim/flows.py) as the compiled code sees it.
Flows = namedtuple("Flows", "received edge_items rr served busy_s order order_len")
# What the next step needs and did not find (see `_room`).
Needs = namedtuple("Needs", "noise cohorts outputs incidents")  # outputs: gaps, samples, latencies

# counters in `Sampling.gaps_at`, `Sampling.taken`, `Needs.outputs`
POS, END = 0, 1
SAMPLES, LATENCIES, GAPS = 0, 1, 2
# `_run` ends ...
STOPPED = 0  # at the end, before a cloud event or after a monitoring/reasoning step
NEEDS_ROOM = 1  # before a step that needs room: make it and call again


class CohortNetwork:
    def __init__(self, topology: Topology, hop_s: float, recorder: SampleRecorder,
                 incidents: Optional[IncidentProcess] = None):
        self.topology = topology
        self.hop_s = hop_s
        self.timeout_s = topology.item_timeout_s  # 0: none (items older are dropped when taken)
        self.hold_until = -math.inf  # the sources' items emitted before this enter the topology then
        self.pause = SourcePause()  # the sources' trace clock (restarts that pause it)
        self.capacity_noise = np.ones((len(topology.operators), 0))  # per operator and step (no column: none)
        self.recorder = recorder
        ops = topology.operators
        self._ops = list(ops)
        self._index = {o: k for k, o in enumerate(ops)}
        self._edge = {e: i for i, e in enumerate(topology.edges)}
        self._op_names = np.array(ops, dtype=object)
        self._names: List[str] = [""]  # instance id -> name; id 0: a sample taken with no instance
        self._ids: Dict[str, int] = {"": 0}
        self._instance_names = np.array(self._names, dtype=object)
        self._serving: List[Sequence[str]] = [()] * len(ops)  # the instances set last, per operator
        self.flows = FlowArrays(ops, topology.edges, self._names)
        n = len(ops)
        outs = [[(self._index[d], self._edge[(o, d)]) for d in topology.downstream[o]] for o in ops]
        self._graph_parts = dict(
            selectivity=np.array([topology.selectivity[o] for o in ops], dtype=np.float64),
            sink=np.array([not topology.downstream[o] for o in ops], dtype=np.bool_),
            incident=np.array([bool(incidents is not None and incidents.on(k)) for k in range(len(ops))],
                              dtype=np.bool_),
            out_start=np.cumsum([0] + [len(x) for x in outs]).astype(np.int64),
            out_op=np.array([d for x in outs for d, _ in x], dtype=np.int64),
            out_edge=np.array([e for x in outs for _, e in x], dtype=np.int64),
            cpu_cores=np.array([topology.configs[o].service.cpu_cores for o in ops], dtype=np.float64),
            base_service=np.array([topology.configs[o].service.mean_ms / 1000.0 for o in ops], dtype=np.float64),
        )
        self.shared_cores = 0.0  # backend.shared_cores: 0, none (set_shared_cores)
        self.competing = 0.0  # backend.competing_threads (set_shared_cores)
        self.set_sources(StepClock(1.0, 0.0), SourceTicks([], [], (), ()))
        # Arrays start small and grow as `_room` asks (_make_room, _widen_*).
        self.q = Queues(count=_ints(n, 16), send0=_floats(n, 16), delta=_floats(n, 16), origin0=_floats(n, 16),
                        origin_delta=_floats(n, 16), head=_ints(n), size=_ints(n), waiting=_ints(n),
                        processed=_ints(n), owed=_floats(n), expired=_ints(n))
        self.slots = Slots(free=_floats(n, 8), slots=_ints(n), target=_ints(n), service=np.ones(n),
                           instances=_ints(n, 8), n_instances=_ints(n), rounds=_ints(8), rotated=_floats(8))
        state = recorder.arrays()
        self._every, self._geometric, self._truncate, self._epoch = (
            state.every, state.geometric, state.truncate, state.epoch)
        self._gap_draws, self._noise_draws = state.gaps, state.noise
        gaps = state.gaps.rest().astype(np.int64)
        self.sampling = Sampling(
            gap=state.gap, rr=state.rr, noise=_floats(n, 1), noise_pos=_ints(n), noise_end=_ints(n),
            gaps=gaps, gaps_at=np.array([0, len(gaps)], dtype=np.int64),
            t=_floats(256), op=_ints(256), instance=_ints(256), duration_ms=_floats(256),
            lat_t=_floats(256), lat_op=_ints(256), lat_ms=_floats(256), taken=_ints(2),
        )
        for k, draws in enumerate(state.noise):
            self._draw_noise(k, 0, draws.rest())
        self.needs = Needs(noise=_ints(n), cohorts=_ints(n), outputs=_ints(3), incidents=_ints(n))
        self._incident_draws: List[Optional[DrawBuffer]] = incidents.draws if incidents is not None else [None] * n
        self.incidents = Incidents(gap=np.array(incidents.gap if incidents is not None else [0] * n, dtype=np.int64),
                                   draws=_ints(n, 1), pos=_ints(n), end=_ints(n))
        for k, buffer in enumerate(self._incident_draws):
            if buffer is not None:
                self._draw_incidents(k, 0, buffer.rest())

    # -- the simulator's interface ---------------------------------------------------------
    def set_sources(self, clock: StepClock, ticks: SourceTicks) -> None:
        """The run's clock and the sources' ticks, which `run` emits."""
        self.clock, self.ticks, self.ticks_emitted = clock, ticks, 0
        idx = self._index
        self.graph = Graph(
            **self._graph_parts,
            src_op=np.array([idx[o] for _, o, _ in ticks.edges], dtype=np.int64),
            src_per_machine=np.array([n for _, _, n in ticks.edges], dtype=np.int64),
            src_edge=np.array([self._edge[(s, o)] for s, o, _ in ticks.edges], dtype=np.int64),
            tick_t=np.array(ticks.times, dtype=np.float64),
            tick_machines=np.array(ticks.machines, dtype=np.int64),
        )

    def set_capacity(self, slots: Dict[str, int], service_s: Dict[str, float],
                     instances: Dict[str, Sequence[str]]) -> None:
        """Slots, mean service times and serving instances per operator from the next step on."""
        width = max([slots[o] for o in self._ops] + [len(instances[o]) for o in self._ops] + [1])
        if width > self.slots.free.shape[1]:
            self._widen_slots(2 * width)
        sl = self.slots
        for k, o in enumerate(self._ops):
            sl.target[k] = slots[o]
            sl.service[k] = service_s[o]
            if instances[o] != self._serving[k]:
                self._serving[k] = list(instances[o])
                ids = [self._intern(i) for i in instances[o]]
                sl.instances[k, :len(ids)] = ids
                sl.n_instances[k] = len(ids)
        self._sync_flows()

    def set_shared_cores(self, cores: float, competing: float = 0.0) -> None:
        """The cores all instances share (backend.shared_cores; 0: none) and the other processes'
        runnable threads that compete for them (backend.competing_threads): when the busy slots and
        those threads need more, every busy slot runs slower by their sum / cores (`_shared_factor`)."""
        self.shared_cores = float(cores)
        self.competing = float(competing)

    def _machine(self) -> np.ndarray:
        return np.array([self.shared_cores, self.competing], dtype=np.float64)

    def run(self, step: int, stop_after: float, next_event: float) -> int:
        """Emit and serve from `step` on; return the next step: after the first step ending at or
        after `stop_after`, before the first step starting at or after `next_event`, or at the end
        (as `testbed.sim.clock.SteppedInPython.run`)."""
        clock = self.clock
        while True:
            tick = np.array([self.ticks_emitted], dtype=np.int64)
            step, status = _run(self.q, self.slots, self.graph, self.sampling, self.incidents, self._fl, self.needs,
                                tick, self.hop_s, self._every, self._geometric, self._truncate, self._epoch,
                                clock.dt, clock.duration, clock.steps, step, stop_after, next_event, self.timeout_s,
                                self.hold_until, self.capacity_noise, self._machine())
            self.ticks_emitted = int(tick[0])
            self._collect()
            if status == STOPPED:
                return step
            self._make_room()

    def advance(self, t0: float, t1: float, slots: Dict[str, int], service_s: Dict[str, float],
                instances: Dict[str, Sequence[str]]) -> None:
        """Serve every operator (upstream first) for the step [t0, t1) with these slots (items sent
        with `send`; no ticks)."""
        self.set_capacity(slots, service_s, instances)
        while not _advance(self.q, self.slots, self.graph, self.sampling, self.incidents, self._fl, self.needs,
                           self.hop_s, self._every, self._geometric, self._truncate, self._epoch, t0, t1,
                           self.timeout_s, self.capacity_noise, int(round(t0 / self.clock.dt)),
                           self._machine()):
            self._collect()
            self._make_room()
        self._collect()

    def send(self, source: str, operator: str, t: float, count: int) -> None:
        """Items a source emits at t (their origin)."""
        if count > 0:
            k = self._index[operator]
            if self.q.size[k] == self.q.count.shape[1]:
                self._widen_queues(2 * self.q.count.shape[1])
            _push(self.q, k, count, t, 0.0, t, 0.0)
            self.flows.received[k] += count
            self.flows.edge_items[self._edge[(source, operator)]] += count

    def purge(self, t: float, keep: Collection[str] = ()) -> Dict[str, int]:
        """Drop everything waiting (a restart with purge) but in the queues of `keep`; the items per operator."""
        dropped = {}
        q = self.q
        for k, o in enumerate(self._ops):
            if o in keep:
                continue
            dropped[o] = int(q.waiting[k])
            self.flows.drop(o, "purge", dropped[o])
            q.size[k] = 0
            q.waiting[k] = 0
        return dropped

    def set_capacity_noise(self, factors: Dict[str, np.ndarray]) -> None:
        """Per operator, a factor per step on its capacity (the step's service time is divided by it);
        operators not given keep factor 1."""
        steps = max(len(f) for f in factors.values())
        noise = np.ones((len(self._ops), steps))
        for o, f in factors.items():
            noise[self._index[o], :len(f)] = f
        self.capacity_noise = noise

    def source_downtime(self, t: float, until: float, mode: str) -> None:
        """A restart's downtime at the sources (Restart.source). `hold`: items the sources emit
        before `until` enter the topology at `until` (they wait at the source; their latency and
        timeout start when they enter). `pause`: the ticks not yet emitted move by the time the
        sources' trace clock newly stands still (those moved past the run's end are never emitted).
        `drop`: they never enter: the ticks not yet emitted before `until` are emptied and their
        items counted now as received by and dropped at the operators they were sent to (the totals
        of every interval still close; the 1 s rows of `edges` and `dropped` have them up to the
        downtime early)."""
        if mode == "hold":
            self.hold_until = max(self.hold_until, until)
            return
        if mode == "pause":
            self.graph.tick_t[self.ticks_emitted:] += self.pause.stop(t, until)
            return
        if mode != "drop":
            return
        g, k, fl = self.graph, self.ticks_emitted, self.flows
        while k < len(g.tick_t) and g.tick_t[k] < until - EPS:
            for source, operator, per_machine in self.ticks.edges:
                n = int(g.tick_machines[k]) * per_machine
                fl.received[self._index[operator]] += n
                fl.edge_items[self._edge[(source, operator)]] += n
                fl.drop(operator, SOURCE_DROP, n)
            g.tick_machines[k] = 0
            k += 1

    @property
    def tick_times(self) -> np.ndarray:
        """When each tick is emitted (paused sources move them)."""
        return self.graph.tick_t

    def depth(self, operator: str) -> int:
        return int(self.q.waiting[self._index[operator]])

    def processed(self, operator: str) -> int:
        return int(self.q.processed[self._index[operator]])

    # -- Python's side of the arrays -------------------------------------------------------
    @property
    def _fl(self) -> Flows:
        f = self.flows
        return Flows(f.received, f.edge_items, f.rr, f.served, f.busy_s, f.order, f.order_len)

    def _intern(self, name: str) -> int:
        ident = self._ids.get(name)
        if ident is None:
            ident = self._ids[name] = len(self._names)
            self._names.append(name)
        return ident

    def _sync_flows(self) -> None:
        if len(self.flows.served) < len(self._names):
            self.flows.grow(2 * len(self._names))

    def _collect(self) -> None:
        """Hand the samples and latencies taken to the recorder and the flow counters."""
        smp, ops = self.sampling, self._op_names
        n, m = smp.taken[SAMPLES], smp.taken[LATENCIES]
        if n:
            if len(self._instance_names) < len(self._names):
                self._instance_names = np.array(self._names, dtype=object)
            self.recorder.extend(smp.t[:n].tolist(), smp.op[:n],
                                 self._instance_names[smp.instance[:n]].tolist(), smp.duration_ms[:n].tolist())
        if m:
            fl = self.flows
            fl.latency_t += smp.lat_t[:m].tolist()
            fl.latency_op += ops[smp.lat_op[:m]].tolist()
            fl.latency_ms += smp.lat_ms[:m].tolist()
        smp.taken[:] = 0
        if self.timeout_s > 0:
            for k in np.flatnonzero(self.q.expired).tolist():
                self.flows.drop(self._ops[k], "timeout", int(self.q.expired[k]))
                self.q.expired[k] = 0

    def _make_room(self) -> None:
        """Room for the next step as `_room` asked (after `_collect`: the output buffers are empty)."""
        q, smp, needs = self.q, self.sampling, self.needs
        cohorts = int(needs.cohorts.max())
        if cohorts > q.count.shape[1]:
            self._widen_queues(2 * cohorts)
        for k in np.flatnonzero(needs.noise > smp.noise_end - smp.noise_pos).tolist():
            self._draw_noise(k, int(needs.noise[k]))
        inc = self.incidents
        for k in np.flatnonzero(needs.incidents > inc.end - inc.pos).tolist():
            self._draw_incidents(k, int(needs.incidents[k]))
        smp = self.sampling  # _draw_noise may have replaced the noise rows (wider)
        if needs.outputs[GAPS] > smp.gaps_at[END] - smp.gaps_at[POS]:
            rest = smp.gaps[smp.gaps_at[POS]:smp.gaps_at[END]]
            blocks = [rest]
            while sum(len(b) for b in blocks) < needs.outputs[GAPS]:
                blocks.append(self._gap_draws.block())
            gaps = np.concatenate(blocks).astype(np.int64)
            self.sampling = smp = smp._replace(gaps=gaps, gaps_at=np.array([0, len(gaps)], dtype=np.int64))
        width = int(max(needs.outputs[SAMPLES], needs.outputs[LATENCIES]))
        if width > len(smp.t):
            width *= 2
            self.sampling = smp._replace(t=_floats(width), op=_ints(width), instance=_ints(width),
                                         duration_ms=_floats(width), lat_t=_floats(width), lat_op=_ints(width),
                                         lat_ms=_floats(width))
        needs.noise[:] = 0
        needs.incidents[:] = 0
        needs.cohorts[:] = 0
        needs.outputs[:] = 0

    def _draw_noise(self, k: int, need: int, first: Optional[np.ndarray] = None) -> None:
        """At least `need` service-time factors for operator k: what is left, then whole blocks of its
        stream (`first`: the recorder's block it had begun)."""
        smp = self.sampling
        left = smp.noise[k, smp.noise_pos[k]:smp.noise_end[k]].copy() if first is None else first
        blocks = [left.astype(np.float64)]
        while sum(len(b) for b in blocks) < need:
            blocks.append(self._noise_draws[k].block())
        row = np.concatenate(blocks)
        if len(row) > smp.noise.shape[1]:  # wider rows for all, each from its first unused draw
            wider = np.zeros((smp.noise.shape[0], 2 * len(row)))
            for j in range(smp.noise.shape[0]):
                wider[j, :smp.noise_end[j] - smp.noise_pos[j]] = smp.noise[j, smp.noise_pos[j]:smp.noise_end[j]]
                smp.noise_end[j] -= smp.noise_pos[j]
                smp.noise_pos[j] = 0
            self.sampling = smp = smp._replace(noise=wider)
        smp.noise[k, :len(row)] = row
        smp.noise_pos[k], smp.noise_end[k] = 0, len(row)

    def _draw_incidents(self, k: int, need: int, first: Optional[np.ndarray] = None) -> None:
        """At least `need` incident gaps for operator k: what is left, then whole blocks of its stream
        (`first`: the process's block it had begun); as `_draw_noise`."""
        inc = self.incidents
        left = inc.draws[k, inc.pos[k]:inc.end[k]].copy() if first is None else first
        blocks = [left.astype(np.int64)]
        buffer = self._incident_draws[k]
        assert buffer is not None
        while sum(len(b) for b in blocks) < need:
            blocks.append(buffer.block().astype(np.int64))
        row = np.concatenate(blocks)
        if len(row) > inc.draws.shape[1]:  # wider rows for all, each from its first unused draw
            wider = np.zeros((inc.draws.shape[0], 2 * len(row)), dtype=np.int64)
            for j in range(inc.draws.shape[0]):
                wider[j, :inc.end[j] - inc.pos[j]] = inc.draws[j, inc.pos[j]:inc.end[j]]
                inc.end[j] -= inc.pos[j]
                inc.pos[j] = 0
            self.incidents = inc = inc._replace(draws=wider)
        inc.draws[k, :len(row)] = row
        inc.pos[k], inc.end[k] = 0, len(row)

    def _widen_queues(self, width: int) -> None:
        """Rings of `width` cohorts, each queue's cohorts from its head at index 0."""
        q = self.q
        n, old = q.count.shape
        order = (q.head[:, None] + np.arange(old)[None, :]) % old
        rows = np.arange(n)[:, None]
        fields = {}
        for name in ("count", "send0", "delta", "origin0", "origin_delta"):
            a = getattr(q, name)
            wide = np.zeros((n, width), dtype=a.dtype)
            wide[:, :old] = a[rows, order]
            fields[name] = wide
        q.head[:] = 0
        self.q = q._replace(**fields)

    def _widen_slots(self, width: int) -> None:
        sl = self.slots
        n, old = sl.free.shape
        free = np.zeros((n, width))
        free[:, :old] = sl.free
        instances = np.zeros((n, width), dtype=np.int64)
        instances[:, :old] = sl.instances
        self.slots = sl._replace(free=free, instances=instances, rounds=np.zeros(width, dtype=np.int64),
                                 rotated=np.zeros(width))


def _ints(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.int64)


def _floats(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float64)


# -- the compiled model --------------------------------------------------------------------------

@njit(cache=True)
def _push(q, k, count, send0, delta, origin0, origin_delta):
    """Append a cohort to operator k's queue (the ring has room)."""
    width = q.count.shape[1]
    i = (q.head[k] + q.size[k]) % width
    q.count[k, i] = count
    q.send0[k, i] = send0
    q.delta[k, i] = delta
    q.origin0[k, i] = origin0
    q.origin_delta[k, i] = origin_delta
    q.size[k] += 1
    q.waiting[k] += count


@njit(cache=True)
def _run(q, sl, g, smp, inc, fl, needs, tick, hop, every, geometric, truncate, epoch,
         dt, duration, steps, step, stop_after, next_event, timeout, hold, noise, shared):
    """Steps from `step` on, each: the sources' ticks before its end, then every operator served
    (`_step`). Returns (next step, STOPPED or NEEDS_ROOM)."""
    while True:
        t0 = step * dt
        t1 = min((step + 1) * dt, duration)
        if not _room(q, sl, g, smp, inc, needs, tick, geometric, t1):
            return step, NEEDS_ROOM
        while tick[0] < len(g.tick_t) and g.tick_t[tick[0]] < t1 - EPS:
            k = tick[0]
            for e in range(len(g.src_op)):
                count = g.tick_machines[k] * g.src_per_machine[e]
                if count > 0:
                    emit = g.tick_t[k] if g.tick_t[k] >= hold else hold  # held at the source until `hold`
                    _push(q, g.src_op[e], count, emit, 0.0, emit, 0.0)
                    fl.received[g.src_op[e]] += count
                    fl.edge_items[g.src_edge[e]] += count
            tick[0] = k + 1
        _step(q, sl, g, smp, inc, fl, hop, every, geometric, truncate, epoch, t0, t1, timeout, noise, step, shared)
        step += 1
        if t1 >= stop_after or step >= steps or step * dt >= next_event:
            return step, STOPPED


@njit(cache=True)
def _advance(q, sl, g, smp, inc, fl, needs, hop, every, geometric, truncate, epoch, t0, t1, timeout, noise, step,
             shared):
    """One step without ticks; False (nothing done) if it needs room first."""
    tick = np.zeros(1, dtype=np.int64)
    tick[0] = len(g.tick_t)
    if not _room(q, sl, g, smp, inc, needs, tick, geometric, t1):
        return False
    _step(q, sl, g, smp, inc, fl, hop, every, geometric, truncate, epoch, t0, t1, timeout, noise, step, shared)
    return True


@njit(cache=True)
def _room(q, sl, g, smp, inc, needs, tick, geometric, t1):
    """Whether the step ending at t1 fits the arrays. An operator starts at most what it holds plus
    what arrives in the step (the ticks', and its upstream operators' outputs of at most their own
    bound times selectivity, or one per item for an incident operator); each item started takes at
    most one service draw, one gap draw, one incident gap, one sample and one latency. What does
    not fit is written to `needs`."""
    n = len(q.waiting)
    bound = np.zeros(n, dtype=np.int64)
    cohorts = q.size.copy()
    k = tick[0]
    while k < len(g.tick_t) and g.tick_t[k] < t1 - EPS:
        for e in range(len(g.src_op)):
            bound[g.src_op[e]] += g.tick_machines[k] * g.src_per_machine[e]
            cohorts[g.src_op[e]] += 1
        k += 1
    total, sinks, fits = 0, 0, True
    for op in range(n):
        bound[op] += q.waiting[op]
        if g.incident[op]:
            out = bound[op] + 1
            if inc.end[op] - inc.pos[op] < bound[op]:
                needs.incidents[op] = bound[op]
                fits = False
        else:
            out = int(q.owed[op] + bound[op] * g.selectivity[op]) + 1
        for j in range(g.out_start[op], g.out_start[op + 1]):
            bound[g.out_op[j]] += out
            cohorts[g.out_op[j]] += 1
        total += bound[op]
        if g.sink[op]:
            sinks += bound[op]
        if smp.noise_end[op] - smp.noise_pos[op] < bound[op]:
            needs.noise[op] = bound[op]
            fits = False
        if cohorts[op] > q.count.shape[1]:
            needs.cohorts[op] = cohorts[op]
            fits = False
    if geometric and smp.gaps_at[END] - smp.gaps_at[POS] < total:
        needs.outputs[GAPS] = total
        fits = False
    if smp.taken[SAMPLES] + total > len(smp.t) or smp.taken[LATENCIES] + sinks > len(smp.lat_t):
        needs.outputs[SAMPLES] = total  # after Python collected what was taken
        needs.outputs[LATENCIES] = sinks
        fits = False
    return fits


@njit(cache=True)
def _step(q, sl, g, smp, inc, fl, hop, every, geometric, truncate, epoch, t0, t1, timeout, noise, step, shared):
    """Serve every operator (upstream first) for the step [t0, t1); with a timeout, first drop the
    items an operator would take that are older than it at the step's start; with capacity noise
    (a column per step), the step's service time is the mean divided by the operator's factor;
    with shared cores (`shared`: [cores, competing threads], cores > 0) whose busy slots outgrow
    them, multiplied by `_shared_factor`."""
    noisy = step < noise.shape[1]
    factor = _shared_factor(q, sl, g, t0, t1, shared[0], shared[1]) if shared[0] > 0 else 1.0
    for k in range(len(q.waiting)):
        _set_slots(sl, k, t0)
        if sl.slots[k] > 0 and q.size[k] > 0:
            if timeout > 0:
                _expire(q, k, t0 - timeout)
            if q.size[k] > 0:
                if noisy or factor > 1.0:
                    mean = sl.service[k]
                    sl.service[k] = (mean / noise[k, step] if noisy else mean) * factor
                    _serve(q, sl, g, smp, inc, fl, k, hop, every, geometric, truncate, epoch, t0, t1)
                    sl.service[k] = mean
                else:
                    _serve(q, sl, g, smp, inc, fl, k, hop, every, geometric, truncate, epoch, t0, t1)


@njit(cache=True)
def _shared_factor(q, sl, g, t0, t1, shared, competing):
    """backend.shared_cores: processor sharing of the machine's cores by every instance of the run.
    An operator's busy slots in the step [t0, t1) are estimated from the state at its start, as a
    fluid: the time its slots are still busy with items started before t0 (each at most the step)
    plus the service time of what waits in its queue, over the step, at most its slots. A busy slot
    needs the operator's cpu_cores, scaled by the uncontended over the current mean service time
    (a slot already slowed by backend.cpu_contention's per-host factor gets only that share of a
    core: the host's cores cap it first). Other processes' runnable threads (`competing`, each
    wanting a core) join the demand: the scheduler shares the cores among every runnable thread, so
    a busy run is slowed by them even while its own slots need fewer cores than there are. Returns
    demand / shared when the demand exceeds the cores, else 1: every busy slot runs that much
    slower, so the whole machine does at most `shared` cores of work. Idle slots cost nothing."""
    dt = t1 - t0
    if not dt > 0:
        return 1.0
    demand = 0.0
    for k in range(len(q.waiting)):
        c = sl.target[k]
        if c == 0:
            continue
        s = sl.service[k]
        busy_s = q.waiting[k] * s
        free = sl.free[k]
        for j in range(sl.slots[k]):
            left = free[j] - t0
            if left > 0:
                busy_s += left if left < dt else dt
        busy = busy_s / dt
        if busy > c:
            busy = float(c)
        share = g.base_service[k] / s if s > 0 else 1.0
        demand += busy * g.cpu_cores[k] * (share if share < 1.0 else 1.0)
    if competing > 0:
        demand += competing
    return demand / shared if demand > shared else 1.0


@njit(cache=True)
def _expire(q, op, oldest):
    """Drop from the head of operator op's queue the items whose origin is before `oldest` (a
    cohort's origins do not decrease); counted in q.expired."""
    width = q.count.shape[1]
    while q.size[op] > 0:
        i = q.head[op]
        count, origin0, od = q.count[op, i], q.origin0[op, i], q.origin_delta[op, i]
        if not origin0 < oldest:
            return
        if od > 0:
            n = min(count, int(math.ceil((oldest - origin0) / od)))
        else:
            n = count
        q.waiting[op] -= n
        q.expired[op] += n
        if n == count:
            q.head[op] = (i + 1) % width
            q.size[op] -= 1
        else:
            q.count[op, i] = count - n
            q.send0[op, i] = q.send0[op, i] + n * q.delta[op, i]
            q.origin0[op, i] = origin0 + n * od
            return


@njit(cache=True)
def _set_slots(sl, k, t):
    """New slots are free now; removed slots are the busiest (their items still finish)."""
    c, target = sl.slots[k], sl.target[k]
    if target == c:
        return
    free = sl.free[k]
    if target > c:
        free[target - c:target] = free[:c].copy()
        free[:target - c] = t
    sl.slots[k] = target
    _sort(free, target)


@njit(cache=True)
def _serve(q, sl, g, smp, inc, fl, op, hop, every, geometric, truncate, epoch, t0, t1):
    """Operator op's cohorts, FIFO, onto its slots for [t0, t1): the closed form of the module's
    docstring, cohort after cohort while a whole cohort starts before t1."""
    s = sl.service[op]
    c = sl.slots[op]
    free = sl.free[op]
    rounds = sl.rounds
    width = q.count.shape[1]
    for k in range(c):
        if not free[k] > t0:
            free[k] = t0  # an idle slot is free from the step's start
    first_finish = last_finish = -1.0
    origin_first = origin_last = 0.0
    started = 0
    while q.size[op] > 0:
        i = q.head[op]
        count, send0, d = q.count[op, i], q.send0[op, i], q.delta[op, i]
        origin0, origin_delta = q.origin0[op, i], q.origin_delta[op, i]
        a0 = send0 + hop
        if a0 >= t1:
            break
        h = c * d if c * d > s else s  # per-slot spacing of arrivals vs service
        k_items = 0
        for k in range(c):
            b = a0 + k * d
            r_cap = math.ceil((t1 - free[k]) / s) if t1 > free[k] else 0
            r_arr = math.ceil((t1 - b) / h) if t1 > b else 0
            r_max = (count - k + c - 1) // c
            r = min(r_cap, r_arr, r_max)
            rounds[k] = r
            k_items += r
        if k_items == 0:
            break
        # FIFO prefix: slot k took rounds[k]; round-robin order makes these the first k_items.
        j = smp.gap[op]  # the sampled ones among them (SampleRecorder.take)
        while j < k_items:
            k, r = j % c, j // c
            fk = free[k] + r * s
            bk = a0 + k * d + r * h
            start = fk if fk > bk else bk
            finish = start + s * _next_noise(smp, op)
            _record(smp, sl, op, send0 + j * d, finish, truncate, epoch)
            if g.sink[op]:
                _latency(smp, op, finish, finish - (origin0 + j * origin_delta))
            j += _sample_gap(smp, every, geometric)
        smp.gap[op] = j - k_items
        if started == 0:
            origin_first = origin0
        origin_last = origin0 + (k_items - 1) * origin_delta
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
            rotated = sl.rotated
            for k in range(c):
                rotated[k] = free[(k + shift) % c]
            free[:c] = rotated[:c]
        started += k_items
        q.count[op, i] = count - k_items
        q.send0[op, i] = send0 + k_items * d
        q.origin0[op, i] = origin0 + k_items * origin_delta
        if count == k_items:
            q.head[op] = (i + 1) % width
            q.size[op] -= 1
        else:
            break  # the rest of this cohort cannot start before t1
    _sort(free, c)
    if started:
        q.waiting[op] -= started
        q.processed[op] += started
        _count_served(sl, fl, op, started, started * s)
        _emit(q, g, inc, fl, op, started, first_finish, last_finish, origin_first, origin_last)


@njit(cache=True)
def _sort(a, n):
    """Sort a[:n] in place: insertion sort, as the slots' free times are nearly sorted."""
    for i in range(1, n):
        v = a[i]
        j = i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v


@njit(cache=True)
def _emit(q, g, inc, fl, op, started, first_finish, last_finish, origin_first, origin_last):
    """Outputs of one step leave spread evenly between the first and the last finish; their
    origins spread likewise between those of the first and the last item started. As many as the
    selectivity gives (the fraction carried over), or, for an incident operator, one per item
    started that opens an incident."""
    if g.out_start[op] == g.out_start[op + 1]:
        return
    if g.incident[op]:
        out = _incidents(inc, op, started)
    else:
        total = q.owed[op] + started * g.selectivity[op]
        out = int(total)
        q.owed[op] = total - out
    if out == 0:
        return
    delta = (last_finish - first_finish) / (out - 1) if out > 1 else 0.0
    origin_delta = (origin_last - origin_first) / (out - 1) if out > 1 else 0.0
    for j in range(g.out_start[op], g.out_start[op + 1]):
        d = g.out_op[j]
        _push(q, d, out, first_finish, delta, origin_first, origin_delta)
        fl.received[d] += out
        fl.edge_items[g.out_edge[j]] += out


@njit(cache=True)
def _incidents(inc, op, count):
    """How many of operator op's next `count` inputs open an incident (IncidentProcess.take)."""
    j = inc.gap[op]
    opened = 0
    while j < count:
        opened += 1
        j += 1 + inc.draws[op, inc.pos[op]]
        inc.pos[op] += 1
    inc.gap[op] = j - count
    return opened


@njit(cache=True)
def _count_served(sl, fl, op, count, busy_s):
    """As FlowCounters.serve: items go to the slots in rotation, so the operator's instances share
    them evenly; the remainder goes round."""
    m = sl.n_instances[op]
    if m == 0 or count == 0:
        return
    base, extra = count // m, count % m
    first = fl.rr[op]
    per_item = busy_s / count
    for k in range(m):
        n = base + (1 if (k - first) % m < extra else 0)
        if n:
            i = sl.instances[op, k]
            if fl.served[i] == 0:  # first service in this interval
                fl.order[fl.order_len[0]] = i
                fl.order_len[0] += 1
            fl.served[i] += n
            fl.busy_s[i] = fl.busy_s[i] + n * per_item
    fl.rr[op] = (first + extra) % m


# -- sampling and measurement (SampleRecorder's rules) -------------------------------------------

@njit(cache=True)
def _sample_gap(smp, every, geometric):
    """From one sampled item to the next: every `every`-th, or a geometric gap."""
    if not geometric:
        return every
    gap = smp.gaps[smp.gaps_at[POS]]
    smp.gaps_at[POS] += 1
    return 1 + gap


@njit(cache=True)
def _next_noise(smp, op):
    v = smp.noise[op, smp.noise_pos[op]]
    smp.noise_pos[op] += 1
    return v


@njit(cache=True)
def _record(smp, sl, op, send, finish, truncate, epoch):
    """A sampled item's measured duration, from its send (seconds-truncated: the wall clock's whole
    second) to its finish, at the instance next in turn."""
    if truncate:
        send = math.floor(send + epoch) - epoch
    k = smp.rr[op]
    smp.rr[op] = k + 1
    n = smp.taken[SAMPLES]
    smp.t[n] = finish
    smp.op[n] = op
    m = sl.n_instances[op]
    smp.instance[n] = sl.instances[op, k % m] if m else 0
    smp.duration_ms[n] = (finish - send) * 1000.0
    smp.taken[SAMPLES] = n + 1


@njit(cache=True)
def _latency(smp, op, t, latency_s):
    n = smp.taken[LATENCIES]
    smp.lat_t[n] = t
    smp.lat_op[n] = op
    smp.lat_ms[n] = latency_s * 1000.0
    smp.taken[LATENCIES] = n + 1
