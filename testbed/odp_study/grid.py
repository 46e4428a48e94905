"""The grids of the scalability study (paper §7.3, spec §9.3 and §15.3): which instances to solve.

Every instance is Table 2's homogeneous baseline with one factor changed. One instance can serve
several figures (the 9a/9b/9c baselines coincide), so it is solved once and tagged with each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from testbed.odp_study.generator import Table2, Topology

Size = Tuple[int, int]  # (operators, nodes)


@dataclass(frozen=True)
class Grid:
    name: str
    capacity: float  # baseline C_u
    ops_sweep: Tuple[int, ...]  # Fig. 9a
    ops_sweep_nodes: int
    nodes_sweep: Tuple[int, ...]  # Fig. 9b
    nodes_sweep_ops: int
    capacity_sweep: Tuple[float, ...]  # Fig. 9c
    capacity_size: Size
    sc1: Size  # Sc1: more operators than nodes
    sc2: Size  # Sc2: the same |x| with the two swapped
    sampling_size: Size  # Fig. 10a/b
    fractions: Tuple[float, ...]
    sampling_seeds: int
    trace_size: Size  # Fig. 10c
    time_limit_s: float  # per instance
    trace_limit_s: float
    seeds: int = 1  # seeds per point of Figs. 9a-c


# The paper's grids (Figs. 9a-c, 10a-c). A long opt-in job: the fat instances run into the limit.
FULL = Grid(
    name="full", capacity=4.0,
    ops_sweep=(10, 20, 30, 40, 50), ops_sweep_nodes=20,
    nodes_sweep=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100), nodes_sweep_ops=20,
    capacity_sweep=(2, 3, 4, 5, 6, 7, 8, 9, 10), capacity_size=(20, 20),
    sc1=(50, 20), sc2=(20, 50),
    sampling_size=(50, 20), fractions=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), sampling_seeds=5,
    trace_size=(20, 100), time_limit_s=600.0, trace_limit_s=1000.0,
)

# Small enough for the test suite on 2 shared cores (~40 s). The paper's shapes at a smaller scale:
# C_u = 2 so that 6-8 operators need 3-4 nodes (the paper's 20 operators at C_u = 4 need 5); the
# capacity sweep spans C_u/n = 0.17..0.67 (paper 0.1..0.5); Sc1/Sc2 swap 8 and 6; sampling on 7
# operators × 5 nodes (n > m like the paper's 50 × 20), 40 % being the smallest feasible fraction;
# the trace on 6 operators × 24 nodes (m = 4n, the paper's 100 × 20 has m = 5n).
REDUCED = Grid(
    name="reduced", capacity=2.0,
    ops_sweep=(4, 6, 8), ops_sweep_nodes=6,
    nodes_sweep=(4, 6, 8), nodes_sweep_ops=6,
    capacity_sweep=(1, 2, 3, 4), capacity_size=(6, 6),
    sc1=(8, 6), sc2=(6, 8),
    sampling_size=(7, 5), fractions=(0.4, 0.6, 0.8, 1.0), sampling_seeds=3,
    trace_size=(6, 24), time_limit_s=30.0, trace_limit_s=3.0,
    seeds=2,  # sub-second to few-second solves vary by ±40 % run to run on a shared machine: medians
)

GRIDS: Dict[str, Grid] = {g.name: g for g in (REDUCED, FULL)}


@dataclass(frozen=True)
class Point:
    params: Table2
    experiments: Tuple[str, ...]
    trace: bool = False

    @property
    def instance_id(self) -> str:
        p = self.params
        return f"{p.topology.value}-n{p.n_ops}-m{p.n_nodes}-c{p.c_node:g}-f{p.candidate_fraction:g}-s{p.seed}"


def points(grid: Grid, seed: int = 1) -> List[Point]:
    """The instances of a grid, deduplicated, in a stable order (cheap sweeps first)."""
    tagged: Dict[Table2, List[str]] = {}

    def add(experiment: str, topology: Topology, n: int, m: int, capacity: float = grid.capacity,
            fraction: float = 1.0, s: int = seed) -> None:
        params = Table2(n_ops=n, n_nodes=m, topology=topology, seed=s, c_node=float(capacity),
                        candidate_fraction=fraction)
        tags = tagged.setdefault(params, [])
        if experiment not in tags:
            tags.append(experiment)

    for topology in Topology:
        for k in range(grid.seeds):
            for n in grid.ops_sweep:
                add("fig9a", topology, n, grid.ops_sweep_nodes, s=seed + k)
            for m in grid.nodes_sweep:
                add("fig9b", topology, grid.nodes_sweep_ops, m, s=seed + k)
            for c in grid.capacity_sweep:
                add("fig9c", topology, *grid.capacity_size, capacity=c, s=seed + k)
            add("sc1", topology, *grid.sc1, s=seed + k)
            add("sc2", topology, *grid.sc2, s=seed + k)
        for k in range(grid.sampling_seeds):
            for f in grid.fractions:
                add("fig10ab", topology, *grid.sampling_size, fraction=f, s=seed + k)
    out = [Point(params, tuple(tags)) for params, tags in tagged.items()]
    for topology in Topology:
        n, m = grid.trace_size
        out.append(Point(Table2(n_ops=n, n_nodes=m, topology=topology, seed=seed, c_node=grid.capacity),
                         ("fig10c",), trace=True))
    return out
