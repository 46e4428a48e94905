"""What the network models count between two monitoring reads: items received per operator, items
sent along each edge, items dropped (with the reason), and per instance the items it served and
its busy time; plus the end-to-end latency samples taken at the sinks."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

SOURCE_DROP = "source"  # `dropped` reason: arrivals dropped during a restart's downtime (Restart.drop_source)


class FlowCounters:
    def __init__(self, operators: Sequence[str], edges: Sequence[Tuple[str, str]]):
        self.operators = tuple(operators)
        self.edge_keys = tuple(edges)
        self.received: Dict[str, int] = dict.fromkeys(self.operators, 0)
        self.edges: Dict[Tuple[str, str], int] = dict.fromkeys(self.edge_keys, 0)
        self.dropped: Dict[Tuple[str, str], int] = {}  # (operator, reason) -> items
        self.served: Dict[str, int] = {}  # instance -> items started, in order of first service
        self.busy_s: Dict[str, float] = {}
        self._rr: Dict[str, int] = dict.fromkeys(self.operators, 0)
        # latency samples (never reset: the event log's `latency` table)
        self.latency_t: List[float] = []
        self.latency_op: List[str] = []
        self.latency_ms: List[float] = []

    def send(self, source: str, operator: str, count: int) -> None:
        self.received[operator] += count
        self.edges[(source, operator)] += count

    def drop(self, operator: str, reason: str, count: int) -> None:
        if count:
            key = (operator, reason)
            self.dropped[key] = self.dropped.get(key, 0) + count

    def serve(self, operator: str, instances: Sequence[str], count: int, busy_s: float) -> None:
        """`count` items started by the operator's serving instances in one step, `busy_s` of
        service between them. Items go to the slots in rotation (as in the network models), so
        instances share them evenly; the remainder goes round."""
        m = len(instances)
        if not m or not count:
            return
        base, extra = divmod(count, m)
        first = self._rr[operator]
        per_item = busy_s / count
        for k, instance in enumerate(instances):
            n = base + (1 if (k - first) % m < extra else 0)
            if n:
                self.served[instance] = self.served.get(instance, 0) + n
                self.busy_s[instance] = self.busy_s.get(instance, 0.0) + n * per_item
        self._rr[operator] = (first + extra) % m

    def latency(self, t: float, operator: str, latency_s: float) -> None:
        self.latency_t.append(t)
        self.latency_op.append(operator)
        self.latency_ms.append(latency_s * 1000.0)

    def take_interval(self) -> "FlowCounters":
        """The counts since the previous call (a detached copy); the counters start again from zero."""
        out = FlowCounters.__new__(FlowCounters)
        out.operators, out.edge_keys = self.operators, self.edge_keys
        out.received, out.edges, out.dropped = self.received, self.edges, self.dropped
        out.served, out.busy_s = self.served, self.busy_s
        self.received = dict.fromkeys(self.operators, 0)
        self.edges = dict.fromkeys(self.edge_keys, 0)
        self.dropped, self.served, self.busy_s = {}, {}, {}
        return out


class FlowArrays:
    """The same counts in arrays, for the compiled cohort model (testbed/sim/network.py), which
    updates them exactly as `FlowCounters` would: `received` per operator, `edge_items` per edge of
    `edges`, per instance id `served` and `busy_s` with `order` (ids in order of first service,
    `order_len[0]` of them); `take_interval` reads them into a `FlowCounters`, naming instance id
    i `names[i]` (the model's list, which grows as instances appear)."""

    def __init__(self, operators: Sequence[str], edges: Sequence[Tuple[str, str]], names: List[str]):
        self.names = names
        self.operators = tuple(operators)
        self.edge_keys = tuple(edges)
        self.received = np.zeros(len(self.operators), dtype=np.int64)
        self.edge_items = np.zeros(len(self.edge_keys), dtype=np.int64)
        self.rr = np.zeros(len(self.operators), dtype=np.int64)  # as FlowCounters._rr
        self.served = np.zeros(0, dtype=np.int64)
        self.busy_s = np.zeros(0)
        self.order = np.zeros(0, dtype=np.int64)
        self.order_len = np.zeros(1, dtype=np.int64)
        self.dropped: Dict[Tuple[str, str], int] = {}
        self.latency_t: List[float] = []
        self.latency_op: List[str] = []
        self.latency_ms: List[float] = []

    def grow(self, instances: int) -> None:
        """Room for instance ids below `instances`."""
        extra = instances - len(self.served)
        if extra > 0:
            self.served = np.concatenate([self.served, np.zeros(extra, dtype=np.int64)])
            self.busy_s = np.concatenate([self.busy_s, np.zeros(extra)])
            self.order = np.concatenate([self.order, np.zeros(extra, dtype=np.int64)])

    def drop(self, operator: str, reason: str, count: int) -> None:
        if count:
            key = (operator, reason)
            self.dropped[key] = self.dropped.get(key, 0) + count

    def take_interval(self) -> FlowCounters:
        """The counts since the previous call as a `FlowCounters`; the counters start again from zero."""
        names = self.names
        out = FlowCounters.__new__(FlowCounters)
        out.operators, out.edge_keys = self.operators, self.edge_keys
        out.received = dict(zip(self.operators, self.received.tolist(), strict=True))
        out.edges = dict(zip(self.edge_keys, self.edge_items.tolist(), strict=True))
        out.dropped, self.dropped = self.dropped, {}
        order = self.order[: self.order_len[0]]
        out.served = {names[i]: n for i, n in zip(order.tolist(), self.served[order].tolist(), strict=True)}
        out.busy_s = {names[i]: b for i, b in zip(order.tolist(), self.busy_s[order].tolist(), strict=True)}
        self.received[:] = 0
        self.edge_items[:] = 0
        self.served[order] = 0
        self.busy_s[order] = 0.0
        self.order_len[0] = 0
        return out
