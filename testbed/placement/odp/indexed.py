"""The instance by index: numpy matrices for the model builder, the metrics and the enumerator."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

from testbed.placement.odp.dag import Dag
from testbed.placement.odp.instance import NetworkObjective, OdpInstance


@dataclass(frozen=True)
class Indexed:
    instance: OdpInstance
    dag: Dag
    op_index: Dict[str, int]
    node_index: Dict[str, int]
    candidates: Tuple[np.ndarray, ...]  # per operator: node indices, ascending
    rates: np.ndarray  # (|E|,) λ per edge
    exec_ms: np.ndarray  # (n, m) R_i / S_u
    delay: np.ndarray  # (m, m) d, zero diagonal (self-loops are perfect)
    log_a_node: np.ndarray  # (m,)
    log_a_link: np.ndarray  # (m, m), zero diagonal
    bandwidth: np.ndarray  # (m, m) B, inf where unconstrained and on the diagonal
    demand: np.ndarray  # (n, k)
    capacity: np.ndarray  # (m, k)

    @property
    def n(self) -> int:
        return len(self.op_index)

    @property
    def m(self) -> int:
        return len(self.node_index)

    def network_weight(self, objective: NetworkObjective) -> np.ndarray:
        """Per unit of rate on (u, v): 1, d or d² for u ≠ v; zero on the diagonal (co-location)."""
        if objective is NetworkObjective.TRAFFIC:
            w = np.ones_like(self.delay)
        elif objective is NetworkObjective.NETWORK_USAGE:
            w = self.delay.copy()
        else:
            w = self.delay ** 2
        np.fill_diagonal(w, 0.0)
        return w


def index(inst: OdpInstance) -> Indexed:
    op_index = {o.id: k for k, o in enumerate(inst.operators)}
    node_index = {n.id: k for k, n in enumerate(inst.nodes)}
    m = len(node_index)
    candidates = tuple(
        np.array(sorted(node_index[c] for c in inst.candidates_of(o)), dtype=np.int64) for o in inst.operators
    )
    arcs = [(op_index[e.source], op_index[e.target]) for e in inst.edges]
    speed = np.array([n.S for n in inst.nodes])
    exec_ms = np.array([o.R for o in inst.operators])[:, None] / speed[None, :]
    delay = np.zeros((m, m))
    avail = np.ones((m, m))
    bandwidth = np.full((m, m), np.inf)
    given = set()
    for link in inst.links:
        u, v = node_index[link.source], node_index[link.target]
        delay[u, v], avail[u, v], bandwidth[u, v] = link.d, link.A, link.B
        given.add((u, v))
    for u, v in list(given):  # a pair given in one direction holds for both
        if (v, u) not in given:
            delay[v, u], avail[v, u], bandwidth[v, u] = delay[u, v], avail[u, v], bandwidth[u, v]
    np.fill_diagonal(delay, 0.0)
    np.fill_diagonal(avail, 1.0)
    np.fill_diagonal(bandwidth, np.inf)
    return Indexed(
        instance=inst,
        dag=Dag(len(op_index), arcs),
        op_index=op_index,
        node_index=node_index,
        candidates=candidates,
        rates=np.array([e.rate for e in inst.edges], dtype=float),
        exec_ms=exec_ms,
        delay=delay,
        log_a_node=np.log(np.array([n.A for n in inst.nodes])),
        log_a_link=np.log(avail),
        bandwidth=bandwidth,
        demand=np.array([o.C for o in inst.operators], dtype=float),
        capacity=np.array([n.C for n in inst.nodes], dtype=float),
    )
