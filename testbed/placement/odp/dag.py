"""Source→sink paths of the operator DAG: counted, enumerated (constraint (10) needs one row per
path) and maximised by dynamic programming (response time of a placement, normalisation bounds)."""
from __future__ import annotations

from typing import Callable, List, Sequence, Tuple

Arc = Tuple[int, int]


class Dag:
    """Operators 0..n-1 and arcs (i, j) by index; isolated operators are one-operator paths."""

    def __init__(self, n: int, arcs: Sequence[Arc]):
        self.n = n
        self.arcs = tuple(arcs)
        self.succ: List[List[Tuple[int, int]]] = [[] for _ in range(n)]  # (arc index, target)
        self.pred: List[List[Tuple[int, int]]] = [[] for _ in range(n)]
        for k, (i, j) in enumerate(self.arcs):
            self.succ[i].append((k, j))
            self.pred[j].append((k, i))
        self.sources = tuple(i for i in range(n) if not self.pred[i])
        self.sinks = tuple(i for i in range(n) if not self.succ[i])
        self.order = self._topological_order()

    def _topological_order(self) -> Tuple[int, ...]:
        indeg = [len(p) for p in self.pred]
        ready = [i for i in range(self.n) if indeg[i] == 0]
        order = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for _, j in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) != self.n:
            raise ValueError("the operator graph has a cycle")
        return tuple(order)

    def count_paths(self) -> int:
        paths = [0] * self.n
        for i in self.order:
            paths[i] = 1 if not self.pred[i] else sum(paths[p] for _, p in self.pred[i])
        return sum(paths[s] for s in self.sinks)

    def paths(self) -> List[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
        """Every source→sink path as (operators, arcs), in a deterministic order (iterative DFS, so
        long chains do not hit the recursion limit)."""
        out: List[Tuple[Tuple[int, ...], Tuple[int, ...]]] = []
        for s in self.sources:
            stack: List[Tuple[Tuple[int, ...], Tuple[int, ...]]] = [((s,), ())]
            while stack:
                ops, arcs = stack.pop()
                i = ops[-1]
                if not self.succ[i]:
                    out.append((ops, arcs))
                for k, j in reversed(self.succ[i]):
                    stack.append((ops + (j,), arcs + (k,)))
        return out

    def longest_path(self, op_weight: Callable[[int], float], arc_weight: Callable[[int], float]) -> float:
        """max over source→sink paths of Σ op weights + Σ arc weights."""
        best = [0.0] * self.n
        for i in self.order:
            into = max((best[p] + arc_weight(k) for k, p in self.pred[i]), default=0.0)
            best[i] = into + op_weight(i)
        return max(best[s] for s in self.sinks)
