"""Seeded instances of the paper's scalability study (Table 2, Fig. 8; spec §9.3, §15.3).

Defaults are Table 2's homogeneous baseline. Delays and candidate samples come from separate named
streams, so an instance with sampled candidates has the same delays as its full-candidate twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List, Tuple

import numpy as np

from testbed.placement.odp.instance import Edge, Link, Node, OdpInstance, Operator, Weights
from testbed.rng import stream


class Topology(str, Enum):
    SEQUENTIAL = "seq"  # a chain: |E| = n - 1, one path
    FAT = "fat"  # source → n - 2 parallel operators → sink: |E| = 2n - 4, n - 2 paths


@dataclass(frozen=True)
class Table2:
    n_ops: int = 20
    n_nodes: int = 20
    topology: Topology = Topology.SEQUENTIAL
    seed: int = 1
    r_ms: float = 1000.0  # R_i = 1.0 s
    c_op: float = 1.0
    c_node: float = 4.0
    speed: float = 1.0
    node_availability: float = 1.0
    link_availability: float = 1.0
    delay_mean_ms: float = 22.0
    delay_sd_ms: float = 5.0  # Decision: 5 is σ
    delay_min_ms: float = 1.0
    candidate_fraction: float = 1.0  # each operator's simple random sample of the nodes
    symmetric: bool = False  # directed pairs draw independent delays unless set


def edges_of(topology: Topology, n: int) -> List[Tuple[int, int]]:
    if topology is Topology.SEQUENTIAL:
        return [(i, i + 1) for i in range(n - 1)]
    if n < 3:
        raise ValueError("a fat topology needs at least 3 operators (source, one middle, sink)")
    return [(0, i) for i in range(1, n - 1)] + [(i, n - 1) for i in range(1, n - 1)]


def delays(p: Table2) -> np.ndarray:
    m = p.n_nodes
    d = np.maximum(stream(p.seed, "odp/delays").normal(p.delay_mean_ms, p.delay_sd_ms, size=(m, m)), p.delay_min_ms)
    if p.symmetric:
        d = np.triu(d, 1) + np.triu(d, 1).T
    return np.round(d, 6)  # six decimals: the JSON form round-trips exactly


def candidate_sets(p: Table2) -> List[Tuple[int, ...]]:
    k = max(1, int(round(p.candidate_fraction * p.n_nodes)))
    if k >= p.n_nodes:
        return [tuple(range(p.n_nodes))] * p.n_ops
    rng = stream(p.seed, "odp/candidates")
    return [tuple(sorted(int(u) for u in rng.choice(p.n_nodes, size=k, replace=False))) for _ in range(p.n_ops)]


def table2_instance(p: Table2) -> OdpInstance:
    if p.n_ops < 1 or p.n_nodes < 1:
        raise ValueError("need at least one operator and one node")
    node_ids = [f"n{u}" for u in range(p.n_nodes)]
    sampled = p.candidate_fraction < 1.0
    ops = tuple(
        Operator(f"o{i}", (p.c_op,), p.r_ms, tuple(node_ids[u] for u in cands) if sampled else None)
        for i, cands in enumerate(candidate_sets(p))
    )
    edges = tuple(Edge(f"o{i}", f"o{j}") for i, j in edges_of(p.topology, p.n_ops))
    nodes = tuple(Node(node_ids[u], (p.c_node,), p.speed, p.node_availability) for u in range(p.n_nodes))
    d = delays(p)
    links = tuple(
        Link(node_ids[u], node_ids[v], float(d[u, v]), p.link_availability)
        for u in range(p.n_nodes) for v in range(p.n_nodes) if u != v
    )
    return OdpInstance(ops, edges, nodes, links, Weights(r=1.0))
