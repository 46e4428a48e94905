"""QoS of a placement (spec §3, §6) and the SAW utility with the spec's normalisation (§4, §6).

The bounds are cheap ones from the candidate sets (Decision in spec §4): they need not be attained,
so each normalised term lies in [0, 1]; a term whose bounds coincide counts 0 (no 0/0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from testbed.placement.odp.indexed import Indexed
from testbed.placement.odp.instance import NetworkObjective, Weights


@dataclass(frozen=True)
class Bounds:
    r_min: float
    r_max: float
    log_a_min: float
    log_a_max: float
    z_min: float  # 0: everything co-located
    z_max: float  # Σ λ · the largest u ≠ v term weight among the edge's candidate pairs


@dataclass(frozen=True)
class PlacementMetrics:
    response_time_ms: float  # (1): the worst source→sink path
    availability: float  # (5)
    traffic: float  # (19)
    network_usage: float  # (20)
    elastic_energy: float  # (21)
    utility: float  # F (9) or F_net (22) under the instance's weights

    def network(self, objective: NetworkObjective) -> float:
        return getattr(self, objective.value)


def span(lo: float, hi: float) -> Optional[float]:
    """hi - lo, or None when the two coincide (the term then counts 0)."""
    width = hi - lo
    return width if width > 1e-12 * max(1.0, abs(hi), abs(lo)) else None


def bounds(ix: Indexed) -> Bounds:
    cand = ix.candidates
    arcs = ix.dag.arcs

    def pairs(k: int, matrix: np.ndarray, off_diagonal: bool = False) -> np.ndarray:
        i, j = arcs[k]
        block = matrix[np.ix_(cand[i], cand[j])]
        if off_diagonal:
            block = block[cand[i][:, None] != cand[j][None, :]]
        return block.ravel()

    r_min = ix.dag.longest_path(lambda i: ix.exec_ms[i, cand[i]].min(), lambda k: 0.0)
    r_max = ix.dag.longest_path(lambda i: ix.exec_ms[i, cand[i]].max(), lambda k: pairs(k, ix.delay).max())
    a_nodes = [ix.log_a_node[c] for c in cand]
    a_links = [pairs(k, ix.log_a_link) for k in range(len(arcs))]
    z_max = 0.0
    objective = ix.instance.network_objective
    if objective is not None:
        weight = ix.network_weight(objective)
        for k in range(len(arcs)):
            off = pairs(k, weight, off_diagonal=True)
            z_max += ix.rates[k] * (off.max() if off.size else 0.0)
    return Bounds(
        r_min=r_min, r_max=r_max,
        log_a_min=sum(a.min() for a in a_nodes) + sum(a.min() for a in a_links),
        log_a_max=sum(a.max() for a in a_nodes) + sum(a.max() for a in a_links),
        z_min=0.0, z_max=z_max,
    )


def utility(b: Bounds, w: Weights, response_ms: float, log_a: float, z: float) -> float:
    total = 0.0
    width = span(b.r_min, b.r_max)
    if w.r > 0 and width:
        total += w.r * (b.r_max - response_ms) / width
    width = span(b.log_a_min, b.log_a_max)
    if w.a > 0 and width:
        total += w.a * (log_a - b.log_a_min) / width
    width = span(b.z_min, b.z_max)
    if w.z > 0 and width:
        total += w.z * (b.z_max - z) / width
    return total


def evaluate(ix: Indexed, assignment: Union[Sequence[int], np.ndarray], b: Optional[Bounds] = None) -> PlacementMetrics:
    """Metrics of a placement given as node index per operator index (capacity is not checked)."""
    a = np.asarray(assignment, dtype=np.int64)
    arcs = ix.dag.arcs
    src = a[[i for i, _ in arcs]] if arcs else np.zeros(0, dtype=np.int64)
    dst = a[[j for _, j in arcs]] if arcs else np.zeros(0, dtype=np.int64)
    exec_ms = ix.exec_ms[np.arange(ix.n), a]
    delays = ix.delay[src, dst]
    response = ix.dag.longest_path(lambda i: exec_ms[i], lambda k: delays[k])
    log_a = float(ix.log_a_node[a].sum() + ix.log_a_link[src, dst].sum())
    remote = (src != dst).astype(float) * ix.rates
    traffic = float(remote.sum())
    usage = float((remote * delays).sum())
    energy = float((remote * delays ** 2).sum())
    inst = ix.instance
    z = {None: 0.0, NetworkObjective.TRAFFIC: traffic, NetworkObjective.NETWORK_USAGE: usage,
         NetworkObjective.ELASTIC_ENERGY: energy}[inst.network_objective]
    b = b or bounds(ix)
    return PlacementMetrics(
        response_time_ms=float(response), availability=math.exp(log_a), traffic=traffic,
        network_usage=usage, elastic_energy=energy,
        utility=utility(b, inst.weights, response, log_a, z),
    )


def violations(ix: Indexed, assignment: Sequence[int]) -> list:
    """Why a placement is infeasible (candidates (12), capacity (11), bandwidth (17)); empty if it is not."""
    a = np.asarray(assignment, dtype=np.int64)
    out = []
    for i, u in enumerate(a):
        if u not in ix.candidates[i]:
            out.append(f"operator {i} on a non-candidate node {u}")
    load = np.zeros_like(ix.capacity)
    np.add.at(load, a, ix.demand)
    for u in np.nonzero((load > ix.capacity + 1e-9).any(axis=1))[0]:
        out.append(f"node {u} over capacity")
    flow = np.zeros_like(ix.delay)
    for k, (i, j) in enumerate(ix.dag.arcs):
        if a[i] != a[j]:
            flow[a[i], a[j]] += ix.rates[k]
    for u, v in zip(*np.nonzero(flow > ix.bandwidth + 1e-9), strict=True):
        out.append(f"link {u}->{v} over bandwidth")
    return out


def assignment_of(ix: Indexed, placement: Mapping[str, str]) -> np.ndarray:
    return np.array([ix.node_index[placement[o.id]] for o in ix.instance.operators], dtype=np.int64)
