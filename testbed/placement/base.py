"""Where new instances go: the placement strategy interface and its registry.

A policy decides *how many* instances an operator needs; a `Placement` decides *where* they run.
Both work on the policy's `Plan` (the cycle's scratch copy of the system), so a placement sees the
instances and leases decided earlier in the same cycle. Strategies are pure like policies: no clock,
no I/O. `start` places a batch (a strategy that optimises jointly, such as an integer program,
overrides it); `moves` may propose migrations (none by default).

A strategy registers itself with its typed parameters (`register_placement(name, params, key)`),
as a policy does; the `placement` node of the config is made from the registry: the shared keys
(`name`, `pins`) and a field per strategy's parameters, so a misspelt key fails at composition and
each strategy checks its own values (`PlacementParams.validate`).
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type, TypeVar

from testbed.config_node import node_class
from testbed.discovery import PluginError, claim, discover
from testbed.model import Action, LeaseHost, OperatorType, ScaleUp
from testbed.plan import Plan


@dataclass
class PlacementParams:
    """The base of a strategy's parameters (a dataclass in the strategy's module, registered with it):
    its keys under `placement.<key>`, or directly under `placement` without a key."""

    def validate(self) -> Optional[Tuple[str, str]]:
        """(the field, relative to where the parameters sit, and what is wrong) or None."""
        return None


@dataclass
class PlacementChoice:
    """What every `placement` node has besides the strategies' parameters."""

    name: str = ""  # "" = the policy's own default (first_fit for the threshold baseline, suitability for BTU)
    # odp, tstorm: operator -> the host (vm<k>) its instances run on; shared by the strategies that pin,
    # and checked against the topology (testbed.config)
    pins: Dict[str, str] = field(default_factory=dict)


class Placement(ABC):
    name: str = ""

    @abstractmethod
    def host_for(self, plan: Plan, op: OperatorType) -> Optional[str]:
        """The host for one new instance of `op` among the plan's candidate hosts; None if none fits."""

    def start(self, plan: Plan, operator: str, count: int, reason: str) -> List[Action]:
        """Place `count` new instances of `operator`, leasing a host when none has room (while the
        host limit allows). Each placement is reserved in the plan before the next is chosen."""
        actions: List[Action] = []
        op = plan.types[operator]
        for _ in range(count):
            host = self.host_for(plan, op)
            if host is None:
                if not plan.can_lease():
                    break
                host = plan.lease()
                actions.append(LeaseHost(host, f"no host has room for {operator}: {reason}"))
            plan.place(operator, host)
            actions.append(ScaleUp(operator, host, reason))
        return actions

    def start_many(self, plan: Plan, counts: Dict[str, int], reason: str) -> List[Action]:
        """New instances of several operators at once (a deployment); a strategy that optimises
        jointly (ODP) places them together, the others one operator after the other."""
        actions: List[Action] = []
        for operator, count in counts.items():
            if count > 0:
                actions += self.start(plan, operator, count, reason)
        return actions

    def moves(self, plan: Plan) -> List[Action]:
        """Proposed migrations (`Migrate` actions, already applied to the plan) of a strategy that
        reassigns periodically (ODP's second step, T-Storm); none by default. A policy that wants
        them calls this every cycle (the `static` policy does)."""
        return []

    def bind_run(self, run_cfg: Any) -> None:  # noqa: B027 - an optional hook, a no-op unless overridden
        """Facts of the run a strategy may need beside the plan (ODP: the emulated network); the
        experiment calls it once with the run's resolved config. None by default."""


PlacementFactory = Callable[[Any, PlacementChoice], Placement]  # (its parameters, the node's shared keys)
Factory = TypeVar("Factory", bound=Callable[..., Placement])


@dataclass(frozen=True)
class PlacementEntry:
    name: str
    factory: PlacementFactory
    params: Optional[Type[PlacementParams]]  # None: the strategy has no parameters
    key: str  # its node under `placement`; "": its fields sit directly under `placement`
    module: str

    def params_of(self, node: Any) -> Optional[PlacementParams]:
        """This strategy's parameters in a `placement` node, of its own class (taken from the node's
        fields where they sit flat: the node has several strategies' fields and methods)."""
        if self.params is None:
            return None
        if self.key:
            return getattr(node, self.key)
        return self.params(**{f.name: getattr(node, f.name) for f in dataclasses.fields(self.params)})


_REGISTRY: Dict[str, PlacementEntry] = {}
_classes: Dict[Tuple[str, ...], type] = {}  # the `placement` node's class per set of registered strategies


def register_placement(name: str, params: Optional[Type[PlacementParams]] = None,
                       key: str = "") -> Callable[[Factory], Factory]:
    """Make a strategy known under `name`: its factory gets its parameters (`params`, a dataclass
    deriving from PlacementParams, under `placement.<key>` or flat) and the node's shared keys."""
    if params is not None and not (isinstance(params, type) and issubclass(params, PlacementParams)):
        raise TypeError(f"placement {name!r}: its parameters must derive from PlacementParams, got {params!r}")

    def add(factory: Factory) -> Factory:
        known = _REGISTRY.get(name)
        claim("placement", name, factory.__module__, known.module if known is not None else None)
        entry = PlacementEntry(name, factory, params, key, factory.__module__)
        _check_keys(entry)
        _REGISTRY[name] = entry
        _classes.clear()  # the node's class has fields more
        return factory

    return add


def _keys(entry: PlacementEntry) -> Set[str]:
    if entry.params is None:
        return set()
    return {entry.key} if entry.key else {f.name for f in dataclasses.fields(entry.params)}


def _check_keys(entry: PlacementEntry) -> None:
    """A strategy's keys under `placement` may not be another's, nor the shared ones: one would hide the other."""
    shared = {f.name for f in dataclasses.fields(PlacementChoice)}
    for other in _REGISTRY.values():
        taken = sorted(_keys(entry) & _keys(other))
        if taken and other.name != entry.name:
            raise PluginError(f"placement {entry.name!r} of module {entry.module} declares placement.{taken[0]}, "
                              f"which placement {other.name!r} of module {other.module} declares already")
    if _keys(entry) & shared:
        raise PluginError(f"placement {entry.name!r} of module {entry.module} may not declare "
                          f"placement.{sorted(_keys(entry) & shared)[0]} (shared by every strategy)")


def placement_entries() -> Dict[str, PlacementEntry]:
    """Every registered strategy by name: the modules of this package that apply
    `@register_placement`, the entry points of the group `testbed.placements` and the modules named
    by `TESTBED_PLACEMENT_MODULES` (testbed/discovery.py) are imported on first use."""
    discover("testbed.placement", "register_placement", "testbed.placements", "TESTBED_PLACEMENT_MODULES")
    return dict(_REGISTRY)


def placements() -> Dict[str, PlacementFactory]:
    """Every registered strategy's factory by name (placement_entries)."""
    return {name: entry.factory for name, entry in placement_entries().items()}


def _rebuild(values: Dict[str, Any]) -> Any:
    """A pickled placement node, made again of this process's node class (registered strategies)."""
    return placement_node_class()(**values)


def placement_node_class() -> type:
    """The `placement` node's dataclass: the shared keys and every registered strategy's parameters
    (one class per set of registered strategies, so that its instances keep their class)."""
    entries = tuple(e for e in placement_entries().values() if e.params is not None)
    names = tuple(e.name for e in entries)
    if names not in _classes:
        flat = tuple(dict.fromkeys(e.params for e in entries if not e.key and e.params is not None))
        keyed = [(e.key, e.params) for e in entries if e.key and e.params is not None]
        _classes[names] = node_class("PlacementConfig", PlacementChoice, flat, keyed, _rebuild, __name__)
    return _classes[names]


def placement_node(**values: Any) -> Any:
    """A `placement` node: every registered strategy's parameters, at their defaults unless given."""
    return placement_node_class()(**values)


def make_placement(name: str, node: Any) -> Placement:
    """The strategy `name`, made from a `placement` node (placement_node, or a config's `placement`)."""
    known = placement_entries()
    if name not in known:
        raise KeyError(f"unknown placement {name!r}; known: {sorted(known)}")
    entry = known[name]
    return entry.factory(entry.params_of(node), node)
