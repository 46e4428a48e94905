"""Operator mode (docs/papers/daedalus.md#mapping): Daedalus and HPA per operator type on a topology
(the OEE topology of the BTU paper), through the platform's snapshot.

Per operator o, every decision cycle adds one sample spanning the time since the previous cycle:
the workload is the items sent to o along its edges per second, each instance's throughput its
processed items per second and its CPU its busy fraction, the lag o's queue. The controllers work at
1 s resolution, so a sample is held for every second it spans (a step series; with a 15 s cycle, 15
identical seconds). Daedalus runs its loop every `loop_s` on the last 61 s; HPA syncs every cycle.
There is no stop-the-world here: a scale-out starts instances (and leases hosts) through the
placement, a scale-in stops the newest; the controller's warm-up counts from its last rescale and
the replay window is 0 (nothing is replayed). Hosts left empty are released."""
from __future__ import annotations

import math
from collections import deque
from typing import Any, Deque, Dict, List, Tuple

import numpy as np

from testbed.model import Action, InstanceState, ReleaseHost, Snapshot
from testbed.placement.first_fit import FirstFit
from testbed.plan import Plan
from testbed.policies.daedalus.controller import LoopWindow
from testbed.policies.scaling import realise, target_of

WINDOW_S = 61
# (t, span, workload/s, {inst: (thr/s, cpu)}, lag)
Sample = Tuple[float, float, float, Dict[str, Tuple[float, float]], float]


def _samples(policy: Any, snapshot: Snapshot) -> Dict[str, Deque[Sample]]:
    """Append this cycle's sample per operator to the policy's buffers (kept for the last 10 min)."""
    st = policy.__dict__.setdefault("_operator_mode", {"last_t": 0.0, "buf": {}})
    span = snapshot.t - st["last_t"]
    st["last_t"] = snapshot.t
    bufs: Dict[str, Deque[Sample]] = st["buf"]
    if span <= 0:
        return bufs
    interval = snapshot.monitoring_s
    inflow: Dict[str, float] = {o: 0.0 for o in snapshot.operators}
    for (_src, dst), items in snapshot.edge_items.items():
        if dst in inflow:
            inflow[dst] += items / interval
    per_op: Dict[str, Dict[str, Tuple[float, float]]] = {o: {} for o in snapshot.operators}
    for inst in snapshot.instances:
        if inst.operator in per_op and inst.id in snapshot.instance_stats:
            processed, util = snapshot.instance_stats[inst.id]
            per_op[inst.operator][inst.id] = (processed / interval, util)
    for o, view in snapshot.operators.items():
        buf = bufs.setdefault(o, deque(maxlen=max(8, int(math.ceil(600 / span)))))
        buf.append((snapshot.t, span, inflow[o], per_op[o], float(view.queue)))
    return bufs


def _window(buf: Deque[Sample], t: float,
            since_rescale: float) -> Tuple[np.ndarray, np.ndarray, dict, dict, np.ndarray]:
    """The last WINDOW_S seconds as 1 s series (each sample held over its span). Every instance of
    the buffer has a series, in order of first appearance (one that served only before the window
    has no throughput and no CPU in it: a worker the capacity model keeps); only the samples that
    reach into the window are expanded."""
    samples = list(buf)
    spans = [int(round(span)) for (_ts, span, _w, _per, _lag) in samples]
    first, covered = len(samples), 0
    while first > 0 and covered < WINDOW_S:
        first -= 1
        covered += spans[first]
    n = min(covered, WINDOW_S)
    names: Dict[str, None] = {}
    for (_ts, _span, _w, per, _lag), k in zip(samples, spans, strict=True):
        for inst in per if k > 0 else ():  # a sample shorter than half a second holds no second
            names.setdefault(inst, None)
    thr_d = {inst: np.zeros(n) for inst in names}
    cpu_d = {inst: np.full(n, np.nan) for inst in names}
    seconds: List[float] = []
    workload: List[float] = []
    uptime: List[float] = []
    idx = n - covered  # the first kept sample's seconds before the window are skipped
    for (ts, _span, w, per, _lag), k in zip(samples[first:], spans[first:], strict=True):
        for j in range(max(0, -idx), k):
            s = ts - (k - 1 - j)
            seconds.append(s)
            workload.append(w)
            uptime.append(max(0.0, s - since_rescale))
            at = idx + j
            for inst, (inst_thr, inst_cpu) in per.items():
                thr_d[inst][at], cpu_d[inst][at] = inst_thr, inst_cpu
        idx += k
    return (np.asarray(seconds), np.asarray(workload), thr_d, cpu_d, np.asarray(uptime))


def _release_empty(plan: Plan) -> List[Action]:
    return [ReleaseHost(h, "no instance left on the host") for h in plan.empty_hosts()]


def daedalus_operator_actions(policy: Any, snapshot: Snapshot) -> List[Action]:
    bufs = _samples(policy, snapshot)
    plan, actions = Plan(snapshot), []
    placement = policy.placement or FirstFit()
    loops = policy.__dict__.setdefault("_loops", {})
    for o, view in snapshot.operators.items():
        if snapshot.t - loops.get(o, -math.inf) < policy.params.loop_s - 1e-9 or o not in bufs:
            continue
        loops[o] = snapshot.t
        c = policy.controllers.get(o)
        if c is None:
            c = policy.controllers[o] = policy.params.controller(o)
        current = set(i.id for i in snapshot.instances_of(o))
        seconds, workload, thr, cpu, uptime = _window(bufs[o], snapshot.t, c.last_rescale)
        thr = {k: v for k, v in thr.items() if k in current}
        cpu = {k: v for k, v in cpu.items() if k in current}
        out = c.loop(LoopWindow(t=snapshot.t, p_cur=view.n, lag=float(view.queue), checkpoint_s=0.0, seconds=seconds,
                                workload=workload, throughput=thr, cpu=cpu, uptime=uptime))
        target = target_of(o, view.n, out.target, out.reason)
        if target is not None:
            actions += realise(plan, target, placement)
    return actions + _release_empty(plan)


def hpa_operator_actions(policy: Any, snapshot: Snapshot) -> List[Action]:
    p = policy.params
    plan, actions = Plan(snapshot), []
    placement = policy.placement or FirstFit()
    for o, view in snapshot.operators.items():
        pods = []
        for inst in snapshot.instances_of(o):
            stats = snapshot.instance_stats.get(inst.id)
            ready = inst.state == InstanceState.running
            pods.append(p.pod(stats[1] if stats is not None else None, ready, inst.id, o))
        target = policy.target(o, snapshot.t, view.n, pods)
        if target is not None:
            actions += realise(plan, target, placement)
    return actions + _release_empty(plan)
