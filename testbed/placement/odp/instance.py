"""An ODP instance (spec odp.md §2, §6): the operator DAG, the nodes and links, the weights.

Units: R and d in milliseconds, rates (λ) and bandwidths (B) in the same data units per second.
Resources (C) are vectors so that CPU and memory can be constrained together (spec §5); a scalar
in JSON is a vector of one. The dataclasses validate themselves, so an instance built in code gets
the same checks as one read from JSON, and every error names the offending field.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple


class InstanceError(ValueError):
    """A malformed instance; `field` is the path of the offending value, e.g. `operators[2].C`."""

    def __init__(self, field_path: str, message: str):
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


class NetworkObjective(str, Enum):
    TRAFFIC = "traffic"                # (19) T: inter-node data rate
    NETWORK_USAGE = "network_usage"    # (20) N: rate × delay
    ELASTIC_ENERGY = "elastic_energy"  # (21) EE: rate × delay²


@dataclass(frozen=True)
class Operator:
    id: str
    C: Tuple[float, ...]  # required resources
    R: float  # execution time per data unit on the reference processor (ms)
    candidates: Optional[Tuple[str, ...]] = None  # None: every node


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    rate: float = 0.0  # λ


@dataclass(frozen=True)
class Node:
    id: str
    C: Tuple[float, ...]  # available resources
    S: float = 1.0  # speed-up over the reference processor
    A: float = 1.0  # availability


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    d: float  # delay (ms)
    A: float = 1.0
    B: float = math.inf  # bandwidth; inf: unconstrained


@dataclass(frozen=True)
class Weights:
    r: float = 1.0
    a: float = 0.0
    z: float = 0.0


@dataclass(frozen=True)
class OdpInstance:
    operators: Tuple[Operator, ...]
    edges: Tuple[Edge, ...]
    nodes: Tuple[Node, ...]
    links: Tuple[Link, ...]  # directed, u ≠ v; a pair given in one direction only holds for both
    weights: Weights = field(default_factory=Weights)
    network_objective: Optional[NetworkObjective] = None

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def operator_ids(self) -> Tuple[str, ...]:
        return tuple(o.id for o in self.operators)

    @property
    def node_ids(self) -> Tuple[str, ...]:
        return tuple(n.id for n in self.nodes)

    def candidates_of(self, op: Operator) -> Tuple[str, ...]:
        return self.node_ids if op.candidates is None else op.candidates


def _validate(inst: OdpInstance) -> None:
    """Every problem raises InstanceError naming the offending key, in the order the fields are declared."""
    if not inst.operators:
        raise InstanceError("operators", "at least one operator is needed")
    if not inst.nodes:
        raise InstanceError("nodes", "at least one node is needed")
    dims = len(inst.nodes[0].C)
    node_ids = _unique_ids([n.id for n in inst.nodes], "nodes")
    for k, n in enumerate(inst.nodes):
        _check_node(n, dims, f"nodes[{k}]")
    op_ids = _unique_ids([o.id for o in inst.operators], "operators")
    for k, o in enumerate(inst.operators):
        _check_operator(o, dims, node_ids, f"operators[{k}]")
    _check_edges(inst, op_ids)
    _check_links(inst, node_ids)
    _check_weights(inst)


def _finite_at_least_zero(value: float, key: str) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise InstanceError(key, f"must be a finite number ≥ 0, not {value}")


def _check_node(n: Node, dims: int, where: str) -> None:
    _check_resources(n.C, dims, f"{where}.C")
    if not (n.S > 0 and math.isfinite(n.S)):
        raise InstanceError(f"{where}.S", f"must be a finite number > 0, not {n.S}")
    _check_availability(n.A, f"{where}.A")


def _check_operator(o: Operator, dims: int, node_ids: set, where: str) -> None:
    _check_resources(o.C, dims, f"{where}.C")
    _finite_at_least_zero(o.R, f"{where}.R")
    if o.candidates is None:
        return
    if not o.candidates:
        raise InstanceError(f"{where}.candidates", "must name at least one node")
    if len(set(o.candidates)) != len(o.candidates):
        raise InstanceError(f"{where}.candidates", "names a node twice")
    unknown = [c for c in o.candidates if c not in node_ids]
    if unknown:
        raise InstanceError(f"{where}.candidates", f"unknown node {unknown[0]!r}")


def _check_edges(inst: OdpInstance, op_ids: set) -> None:
    seen = set()
    for k, e in enumerate(inst.edges):
        where = f"edges[{k}]"
        for end, name in (("from", e.source), ("to", e.target)):
            if name not in op_ids:
                raise InstanceError(f"{where}.{end}", f"unknown operator {name!r}")
        if e.source == e.target:
            raise InstanceError(where, f"self-loop on {e.source!r}")
        if (e.source, e.target) in seen:
            raise InstanceError(where, f"duplicate edge {e.source!r} → {e.target!r}")
        seen.add((e.source, e.target))
        _finite_at_least_zero(e.rate, f"{where}.rate")
    cycle = _find_cycle(op_ids, [(e.source, e.target) for e in inst.edges])
    if cycle:
        raise InstanceError("edges", f"the operator graph has a cycle through {cycle!r}")


def _check_links(inst: OdpInstance, node_ids: set) -> None:
    pairs = set()
    for k, link in enumerate(inst.links):
        where = f"links[{k}]"
        for end, name in (("from", link.source), ("to", link.target)):
            if name not in node_ids:
                raise InstanceError(f"{where}.{end}", f"unknown node {name!r}")
        if link.source == link.target:
            raise InstanceError(where, f"self-loop on {link.source!r} (implicit: d = 0, A = 1)")
        if (link.source, link.target) in pairs:
            raise InstanceError(where, f"duplicate link {link.source!r} → {link.target!r}")
        pairs.add((link.source, link.target))
        _finite_at_least_zero(link.d, f"{where}.d")
        _check_availability(link.A, f"{where}.A")
        if not link.B >= 0:
            raise InstanceError(f"{where}.B", f"must be a number ≥ 0, not {link.B}")
    for u in node_ids:
        for v in node_ids:
            if u != v and (u, v) not in pairs and (v, u) not in pairs:
                raise InstanceError("links", f"no link between {u!r} and {v!r} (the node graph is fully connected)")


def _check_weights(inst: OdpInstance) -> None:
    w = inst.weights
    for name in ("r", "a", "z"):
        _finite_at_least_zero(getattr(w, name), f"weights.{name}")
    if abs(w.r + w.a + w.z - 1.0) > 1e-9:
        raise InstanceError("weights", f"r + a + z must be 1, not {w.r + w.a + w.z:g}")
    if w.z > 0 and inst.network_objective is None:
        raise InstanceError("network_objective", "is needed when weights.z > 0")


def _unique_ids(ids: Sequence[Any], where: str) -> set:
    for k, i in enumerate(ids):
        if not isinstance(i, str) or not i:
            raise InstanceError(f"{where}[{k}].id", f"must be a non-empty string, not {i!r}")
    seen = set()
    for k, i in enumerate(ids):
        if i in seen:
            raise InstanceError(f"{where}[{k}].id", f"duplicate id {i!r}")
        seen.add(i)
    return seen


def _check_resources(values: Tuple[float, ...], dims: int, where: str) -> None:
    if len(values) != dims:
        raise InstanceError(where, f"has {len(values)} resource kinds, the nodes have {dims}")
    for v in values:
        if not (v >= 0 and math.isfinite(v)):
            raise InstanceError(where, f"must hold finite numbers ≥ 0, not {v}")


def _check_availability(a: float, where: str) -> None:
    # A = 0 would make log A = -inf in (8).
    if not (0 < a <= 1):
        raise InstanceError(where, f"must lie in (0, 1], not {a}")


def _find_cycle(ids: Collection[str], edges: Sequence[Tuple[str, str]]) -> Optional[str]:
    succ: Dict[str, List[str]] = {i: [] for i in ids}
    indeg = {i: 0 for i in ids}
    for s, t in edges:
        succ[s].append(t)
        indeg[t] += 1
    ready = [i for i in ids if indeg[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for t in succ[i]:
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    if done == len(ids):
        return None
    return next(i for i in ids if indeg[i] > 0)


# --- JSON ------------------------------------------------------------------------------------

_KEYS = {
    "": ({"operators", "edges", "nodes", "links", "weights"}, {"network_objective"}),
    "operators": ({"id", "C", "R"}, {"candidates"}),
    "edges": ({"from", "to"}, {"rate"}),
    "nodes": ({"id", "C", "S", "A"}, set()),
    "links": ({"from", "to", "d"}, {"A", "B"}),
    "weights": (set(), {"r", "a", "z"}),
}


def instance_from_dict(data: Any) -> OdpInstance:
    """Parse the JSON form (see `testbed odp solve`); raises InstanceError naming the field."""
    obj = _object(data, "", "instance")
    ops = [_operator(o, f"operators[{k}]") for k, o in enumerate(_list(obj, "operators"))]
    edges = [_edge(e, f"edges[{k}]") for k, e in enumerate(_list(obj, "edges"))]
    nodes = [_node(n, f"nodes[{k}]") for k, n in enumerate(_list(obj, "nodes"))]
    links = [_link(link, f"links[{k}]") for k, link in enumerate(_list(obj, "links"))]
    w = _object(obj["weights"], "weights", "weights")
    weights = Weights(**{k: _number(w, k, "weights", default=0.0) for k in ("r", "a", "z")})
    objective = obj.get("network_objective")
    if objective is not None:
        try:
            objective = NetworkObjective(objective)
        except ValueError:
            allowed = ", ".join(o.value for o in NetworkObjective)
            raise InstanceError("network_objective", f"must be one of {allowed}, not {objective!r}") from None
    return OdpInstance(tuple(ops), tuple(edges), tuple(nodes), tuple(links), weights, objective)


def load_instance(path: Path) -> OdpInstance:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise InstanceError("instance", f"not valid JSON: {exc}") from None
    return instance_from_dict(data)


def instance_to_dict(inst: OdpInstance) -> Dict[str, Any]:
    def res(c: Tuple[float, ...]) -> Any:
        return c[0] if len(c) == 1 else list(c)

    ops = []
    for o in inst.operators:
        item: Dict[str, Any] = {"id": o.id, "C": res(o.C), "R": o.R}
        if o.candidates is not None:
            item["candidates"] = list(o.candidates)
        ops.append(item)
    links = []
    for link in inst.links:
        item = {"from": link.source, "to": link.target, "d": link.d, "A": link.A}
        if math.isfinite(link.B):
            item["B"] = link.B
        links.append(item)
    out: Dict[str, Any] = {
        "operators": ops,
        "edges": [{"from": e.source, "to": e.target, "rate": e.rate} for e in inst.edges],
        "nodes": [{"id": n.id, "C": res(n.C), "S": n.S, "A": n.A} for n in inst.nodes],
        "links": links,
        "weights": {"r": inst.weights.r, "a": inst.weights.a, "z": inst.weights.z},
    }
    if inst.network_objective is not None:
        out["network_objective"] = inst.network_objective.value
    return out


def _object(value: Any, where: str, kind: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InstanceError(where or kind, "must be a JSON object")
    required, optional = _KEYS[where.split("[")[0]]
    for key in value:
        if key not in required | optional:
            raise InstanceError(_join(where, key), "unknown field")
    for key in sorted(required):
        if key not in value:
            raise InstanceError(_join(where, key), "missing")
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _list(obj: Mapping[str, Any], key: str) -> List[Any]:
    value = obj[key]
    if not isinstance(value, list):
        raise InstanceError(key, "must be a JSON list")
    return value


def _number(obj: Mapping[str, Any], key: str, where: str, default: Optional[float] = None) -> float:
    if key not in obj and default is not None:
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InstanceError(_join(where, key), f"must be a number, not {value!r}")
    return float(value)


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj[key]
    if not isinstance(value, str) or not value:
        raise InstanceError(_join(where, key), f"must be a non-empty string, not {value!r}")
    return value


def _resources(obj: Mapping[str, Any], where: str) -> Tuple[float, ...]:
    value = obj["C"]
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InstanceError(f"{where}.C", "must not be empty")
    return tuple(_number({"C": v}, "C", where) for v in items)


def _operator(o: Any, where: str) -> Operator:
    o = _object(o, where, "operator")
    candidates = o.get("candidates")
    if candidates is not None:
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise InstanceError(f"{where}.candidates", "must be a list of node ids")
        candidates = tuple(candidates)
    return Operator(_string(o, "id", where), _resources(o, where), _number(o, "R", where), candidates)


def _edge(e: Any, where: str) -> Edge:
    e = _object(e, where, "edge")
    return Edge(_string(e, "from", where), _string(e, "to", where), _number(e, "rate", where, default=0.0))


def _node(n: Any, where: str) -> Node:
    n = _object(n, where, "node")
    return Node(_string(n, "id", where), _resources(n, where), _number(n, "S", where), _number(n, "A", where))


def _link(raw: Any, where: str) -> Link:
    link = _object(raw, where, "link")
    bandwidth = link.get("B")
    return Link(
        _string(link, "from", where), _string(link, "to", where), _number(link, "d", where),
        _number(link, "A", where, default=1.0),
        math.inf if bandwidth is None else _number(link, "B", where),
    )
