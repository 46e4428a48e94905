"""The workload registry: a kind of workload (the `pattern.kind` key) is one dataclass that declares its
name, its own settings and how it builds a `Pattern`.

A kind subclasses `PatternConfig` (the keys every workload has: name, kind, step_minutes, seed_offset),
adds its own fields (typed, with defaults), checks them in `validate()` (raising
``ValueError("<field>: <message>")``) and builds its pattern in `build(rng)`; `@register_workload(name)`
makes it known. The registry finds the modules (testbed/discovery.py): those of `testbed.workloads` that
apply the decorator, the entry points of the group `testbed.workloads`, and the modules named by
`TESTBED_WORKLOAD_MODULES`.

The Hydra node `pattern` is flat (`pattern.levels`, `pattern.path`, ...): a structured config needs one
fixed schema, so `pattern_node()` builds it as the union of every registered kind's fields, which must
agree in type and default where two kinds share a key. Once composed, `kind_settings` turns the node
into the selected kind's own dataclass (only its keys: that is what manifests record).
"""
from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, is_dataclass, make_dataclass
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, Type, TypeVar

import numpy as np

from testbed.discovery import claim, discover

ENTRY_POINT_GROUP = "testbed.workloads"
MODULES_VARIABLE = "TESTBED_WORKLOAD_MODULES"


class Pattern(ABC):
    """The load over time. ``series`` gives the number of active machines (data sources) at each time
    (seconds since the run's start), the one implementation behind ``machines_at``. A pattern that also
    carries ``rates`` (items per second of each second from 0) can drive job mode."""

    name: str
    step_s: float

    @abstractmethod
    def series(self, times_s: np.ndarray) -> np.ndarray:
        """Machines at each time (seconds since run start), as an int64 array."""

    def machines_at(self, t_s: float) -> int:
        return int(self.series(np.array([t_s], dtype=float))[0])


def workload_details(pattern: Pattern) -> Dict[str, str]:
    """What every run's manifest records of its workload, whatever the backend or mode: the SHA-256
    of a trace file's bytes or of a generated series (`sha256`), where the pattern has one."""
    sha = getattr(pattern, "sha256", None)
    return {"workload_sha256": sha} if sha else {}


def step_index(times_s: np.ndarray, step_s: float) -> np.ndarray:
    """Index of the step each time falls in, for the stepped patterns; t < 0 counts as step 0."""
    t = np.maximum(np.asarray(times_s, dtype=float), 0.0)
    return np.floor(t / step_s).astype(np.int64)


class PatternError(ValueError):
    """An invalid pattern setting; ``key`` names the offending key below `pattern.`."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class PatternConfig:
    """The keys of every workload (structured-config node ``pattern``); a kind subclasses it."""

    name: str = "stepwise"
    kind: str = "cycle"  # a registered workload kind
    step_minutes: float = 4.0  # the step of a stepped pattern (cycle, replay, random_walk)
    seed_offset: int = 0  # the pattern's random stream is derived from the run seed + this

    gives_rates: ClassVar[bool] = False  # its patterns carry `rates` (items/s per second): job mode runs them
    counts_machines: ClassVar[bool] = True  # its series are machine counts (not events/s): `patterns plot` draws it

    def validate(self) -> None:
        """ValueError("<field>: <message>") on a bad setting of the kind (the field below `pattern.`)."""

    def build(self, rng: Optional[np.random.Generator]) -> Pattern:
        """The pattern of these (validated) settings; `rng` is the pattern's own random stream."""
        raise NotImplementedError(f"{type(self).__name__} is not a registered workload kind")


S = TypeVar("S", bound=Type[PatternConfig])
_REGISTRY: Dict[str, Type[PatternConfig]] = {}


def register_workload(name: str) -> Callable[[S], S]:
    """Class decorator: make a workload kind (a dataclass subclassing PatternConfig, whose `kind`
    defaults to `name`) known as `pattern.kind=<name>`."""

    def add(cls: S) -> S:
        if not (isinstance(cls, type) and is_dataclass(cls) and issubclass(cls, PatternConfig)):
            raise TypeError(f"workload kind {name!r}: {cls!r} must be a dataclass subclassing PatternConfig")
        if _default(next(f for f in fields(cls) if f.name == "kind")) != name:
            raise TypeError(f"workload kind {name!r}: {cls.__name__} must declare `kind: str = {name!r}`")
        known = _REGISTRY.get(name)
        claim("workload kind", name, cls.__module__, known.__module__ if known is not None else None)
        _REGISTRY[name] = cls
        return cls

    return add


def workload_kinds() -> Dict[str, Type[PatternConfig]]:
    """Every registered workload kind by name (found and imported on first use)."""
    discover("testbed.workloads", "register_workload", ENTRY_POINT_GROUP, MODULES_VARIABLE)
    return dict(sorted(_REGISTRY.items()))


def workload_kind(name: str) -> Type[PatternConfig]:
    """The settings class of a kind; PatternError naming `kind` if none is registered under `name`."""
    known = workload_kinds()
    if name not in known:
        raise PatternError("kind", f"unknown workload kind {name!r}; registered: {', '.join(known)}")
    return known[name]


def kind_settings(cfg: PatternConfig) -> PatternConfig:
    """The node as its kind's own dataclass (the union node of `pattern_node`, or a kind's settings)."""
    cls = workload_kind(cfg.kind)
    if type(cfg) is cls:
        return cfg
    values = {f.name: getattr(cfg, f.name) for f in fields(cls) if f.init and hasattr(cfg, f.name)}
    return cls(**values)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _union_fields() -> List[Tuple[str, Any, dataclasses.Field]]:
    """(name, type, field) of every kind's own keys; a key two kinds declare must agree in type and default."""
    common = {f.name for f in fields(PatternConfig)}
    merged: Dict[str, Tuple[Any, dataclasses.Field, str]] = {}
    for kind, cls in workload_kinds().items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if f.name in common or not f.init:
                continue
            if f.name in merged:
                typ, other, owner = merged[f.name]
                if typ != hints[f.name] or _default(other) != _default(f):
                    raise TypeError(f"workload kinds {owner!r} and {kind!r} both declare pattern.{f.name}, with "
                                    f"another type or default: rename one")
                continue
            merged[f.name] = (hints[f.name], f, kind)
    return [(name, typ, f) for name, (typ, f, _) in merged.items()]


def pattern_schema() -> Type[PatternConfig]:
    """The flat `pattern` node's dataclass: the common keys and every registered kind's own."""
    spec = []
    for name, typ, f in _union_fields():
        default = (dataclasses.field(default_factory=f.default_factory)
                   if f.default_factory is not dataclasses.MISSING else dataclasses.field(default=f.default))
        spec.append((name, typ, default))
    return make_dataclass("PatternNode", spec, bases=(PatternConfig,))


def pattern_node() -> PatternConfig:
    """A default `pattern` node (the stepwise pattern) of the current registry's schema."""
    return pattern_schema()()


def pattern_config(**values: Any) -> PatternConfig:
    """A kind's settings from keyword values (kind defaults to cycle); TypeError for a key the kind lacks."""
    kind = values.get("kind", PatternConfig.kind)
    return workload_kind(kind)(**values)
