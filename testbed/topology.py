"""The operator graph as the simulator and runtime use it, built from the `topology` config."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from testbed.config import OperatorConfig, TopologyConfig
from testbed.model import OperatorType


@dataclass(frozen=True)
class Source:
    name: str
    items_per_tick: int  # per active machine
    downstream: Tuple[str, ...]


@dataclass(frozen=True)
class Topology:
    tick_s: float
    sources: Tuple[Source, ...]
    operators: Tuple[str, ...]  # topological order
    types: Dict[str, OperatorType]
    configs: Dict[str, OperatorConfig]
    downstream: Dict[str, Tuple[str, ...]]
    selectivity: Dict[str, float]  # items sent to EACH downstream operator per item processed
    compliance_excluded: Tuple[str, ...]
    item_timeout_s: float = 0.0  # > 0: items older than this are dropped when an operator takes them

    @property
    def edges(self) -> Tuple[Tuple[str, str], ...]:
        """(source or upstream operator, operator): the sources' edges, then the operators' in
        topological order."""
        return tuple((s.name, d) for s in self.sources for d in s.downstream) + tuple(
            (o, d) for o in self.operators for d in self.downstream[o])

    @property
    def sinks(self) -> Tuple[str, ...]:
        """Operators without downstream operators: where an item's end-to-end latency ends."""
        return tuple(o for o in self.operators if not self.downstream[o])

    @classmethod
    def from_config(cls, cfg: TopologyConfig) -> "Topology":
        order = _topological_order(cfg)
        types = {
            o: OperatorType(o, op.slo_ms, op.cpu_shares, op.memory_mb, op.image_mb, op.stateful)
            for o, op in ((o, cfg.operators[o]) for o in order)
        }
        downstream = {o: tuple(cfg.operators[o].downstream) for o in order}
        # in:out counts all outgoing items; O1's 1:3 sends one item to each of its three successors.
        selectivity = {
            o: (op.ratio_out / op.ratio_in / len(op.downstream)) if op.downstream else 0.0
            for o, op in cfg.operators.items()
        }
        sources = tuple(Source(s, src.items_per_tick, tuple(src.downstream)) for s, src in sorted(cfg.sources.items()))
        return cls(
            tick_s=cfg.tick_ms / 1000.0, sources=sources, operators=tuple(order), types=types,
            configs={o: cfg.operators[o] for o in order}, downstream=downstream, selectivity=selectivity,
            compliance_excluded=tuple(cfg.compliance_excluded), item_timeout_s=float(cfg.item_timeout_s),
        )


def _topological_order(cfg: TopologyConfig) -> List[str]:
    """Kahn's algorithm from the sources' successors; ties broken by name for determinism."""
    indegree = {o: 0 for o in cfg.operators}
    for op in cfg.operators.values():
        for d in op.downstream:
            indegree[d] += 1
    ready = sorted(o for o, k in indegree.items() if k == 0)
    order: List[str] = []
    while ready:
        o = ready.pop(0)
        order.append(o)
        for d in cfg.operators[o].downstream:
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
                ready.sort()
    if len(order) != len(indegree):
        raise ValueError("topology.operators: the graph has a cycle")
    return order
