"""The backend registry: a name maps to what runs a run, its typed settings and what the rest of the
testbed needs to know about it.

A backend registers itself when its module is imported (a `Backend` subclass decorated with
`register_backend`); the registry finds the modules as it finds policies (testbed/discovery.py):
those of this package that apply the decorator, the entry points of the group `testbed.backends`,
and the modules named by `TESTBED_BACKEND_MODULES`. The configuration's `backend` node (one field
per backend's settings), the `backend=<name>` options, the experiment's runs and the readers of run
folders pick the backends up from here.

A registration declares:

* `settings`: a dataclass deriving from `BackendSettings`, the backend's keys, under `backend.<key>`
  (`key`; "" puts its fields directly under `backend`, as the simulator's are);
* `modes`: which of `operator` (a topology of operators) and `job` (one keyed job, job.enabled) it runs;
* `suffix`: what its runs' folders add to the configuration's name, so that they sit beside the
  simulated runs of the same configuration ("" for none);
* `shares_machine`: its runs use the machine's services or cores, so they run one at a time (never
  side by side, never in a sweep);
* `twin`: its settings, and what operators emit under it, are left out of a workload folder's
  settings digest, so its runs sit beside their simulated twins without `mix=true`;
* `emission`: which of an operator's emission modes (`topology.operators.<o>.emission.<field>`) it
  applies.

The class gives the behaviour: `validate(cfg)` (ConfigError naming the key, before anything runs),
`time_compression(cfg)` (job mode: the config's times are divided by it for the run) and `run(run)`,
one signature for every backend and mode.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, Type, TypeVar

from testbed.config_node import node_class
from testbed.discovery import PluginError, claim, discover

if TYPE_CHECKING:
    from testbed.eventlog import Manifest
    from testbed.run_result import RunResult

__all__ = ["Backend", "BackendEntry", "BackendSettings", "RunInputs", "backend_entry", "backends", "backend_node",
           "register_backend"]

ENTRY_POINT_GROUP = "testbed.backends"
MODULES_VARIABLE = "TESTBED_BACKEND_MODULES"
MODES = ("operator", "job")
EMISSIONS = ("sim", "live")  # the modes an operator's emission setting names (testbed.config.EmissionConfig)
DEFAULT_BACKEND = "sim"  # the node's name when nothing chose one (experiments/conf/config.yaml chooses it too)

BackendClass = TypeVar("BackendClass", bound=type)


@dataclass
class BackendSettings:
    """The base of every backend's settings dataclass: its keys under `backend` (the registry refuses
    settings that do not derive from it, so a settings class is one by its type, not by convention)."""


@dataclass(frozen=True)
class RunInputs:
    """What every backend gets for one run: its resolved config (one configuration, times already
    compressed), the policy object, the workload, the run's seed and BTU length, its id and folder."""

    cfg: Any  # testbed.config.ExperimentConfig
    policy: Any  # testbed.policies.contract.Policy
    pattern: Any  # testbed.workloads.patterns.Pattern
    seed: int
    btu_minutes: int
    run_id: str
    run_dir: Path

    @property
    def mode(self) -> str:
        return "job" if self.cfg.job.enabled else "operator"


class Backend:
    """What a backend does; a subclass overrides `run` and, where it has something to say, the others."""

    name: str = ""

    def validate(self, cfg: Any) -> None:
        """Checks of the selected backend's settings against the config; ConfigError naming the key."""

    def time_compression(self, cfg: Any) -> float:
        """f: job mode's configured times are the paper's, divided by f for a run (1: run as given)."""
        return 1.0

    def run(self, run: RunInputs) -> "RunResult":
        raise NotImplementedError(f"backend {self.name!r} does not run anything")


@dataclass(frozen=True)
class BackendEntry:
    name: str
    backend: Backend
    settings: Type[BackendSettings]  # a dataclass: the backend's keys
    key: str  # its node under `backend`; "": its fields sit directly under `backend`
    modes: Tuple[str, ...]
    suffix: str
    shares_machine: bool
    twin: bool
    emission: str
    module: str

    def folder_name(self, configuration: str) -> str:
        """The run folder's name of a configuration run on this backend."""
        return configuration + self.suffix


_REGISTRY: Dict[str, BackendEntry] = {}
_classes: Dict[Tuple[str, ...], type] = {}  # the `backend` node's class per set of registered backends


def _check_declaration(name: str, settings: Type[Any], key: str, modes: Tuple[str, ...], emission: str) -> None:
    if not (is_dataclass(settings) and isinstance(settings, type) and issubclass(settings, BackendSettings)):
        raise TypeError(f"backend {name!r}: its settings must be a dataclass deriving from "
                        f"testbed.backend_registry.BackendSettings, got {settings!r}")
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"backend {name!r}: modes must be some of {MODES}, got {modes!r}")
    if key and not key.isidentifier():
        raise ValueError(f"backend {name!r}: its settings key must be a name, got {key!r}")
    if emission not in EMISSIONS:
        raise ValueError(f"backend {name!r}: emission must be one of {EMISSIONS}, got {emission!r}")


def register_backend(name: str, settings: Type[BackendSettings], key: str, modes: Tuple[str, ...] = MODES,
                     suffix: str = "", shares_machine: bool = False, twin: bool = False,
                     emission: str = "sim") -> Callable[[BackendClass], BackendClass]:
    """Class decorator: make a backend (a `Backend` subclass) known under `name` (see the module's
    docstring for what each argument declares)."""
    _check_declaration(name, settings, key, tuple(modes), emission)

    def add(cls: BackendClass) -> BackendClass:
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            raise TypeError(f"backend {name!r}: {cls!r} must subclass testbed.backend_registry.Backend")
        known = _REGISTRY.get(name)
        claim("backend", name, cls.__module__, known.module if known is not None else None)
        _check_keys(name, settings, key, cls.__module__)
        cls.name = name
        _REGISTRY[name] = BackendEntry(name, cls(), settings, key, tuple(modes), suffix, shares_machine, twin,
                                       emission, cls.__module__)
        _classes.clear()  # the node's class has a field more
        return cls

    return add


def _keys(entry: BackendEntry) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(entry.settings)) if not entry.key else (entry.key,)


def _check_keys(name: str, settings: Type[BackendSettings], key: str, module: str) -> None:
    """A backend's keys under `backend` may not be another's (nor `name`): one would hide the other."""
    mine = {f.name for f in dataclasses.fields(settings)} if not key else {key}
    for other in _REGISTRY.values():
        shared = sorted(mine & set(_keys(other))) if other.name != name else []
        if shared:
            raise PluginError(f"backend {name!r} of module {module} declares backend.{shared[0]}, which backend "
                              f"{other.name!r} of module {other.module} declares already: give it another key")
    if "name" in mine:
        raise PluginError(f"backend {name!r} of module {module} may not declare backend.name (the backend's choice)")


def backends() -> Dict[str, BackendEntry]:
    """Every registered backend by name (found and imported on first use)."""
    discover("testbed.backends", "register_backend", ENTRY_POINT_GROUP, MODULES_VARIABLE)
    return dict(sorted(_REGISTRY.items()))


def backend_entry(name: str) -> BackendEntry:
    known = backends()
    if name not in known:
        raise KeyError(f"unknown backend {name!r}; registered: {sorted(known)}")
    return known[name]


# ---- the configuration's `backend` node -----------------------------------------------------------

def _rebuild(values: Dict[str, Any]) -> Any:
    """A pickled backend node, made again of this process's node class (registered backends)."""
    return backend_node_class()(**values)


@dataclass
class _Choice:
    name: str = DEFAULT_BACKEND  # a registered backend


def _node_class_of(entries: Tuple[BackendEntry, ...]) -> type:
    flat = tuple(e.settings for e in entries if not e.key)
    keyed = [(e.key, e.settings) for e in entries if e.key]
    return node_class("BackendConfig", _Choice, flat, keyed, _rebuild, __name__)


def backend_node_class() -> type:
    """The `backend` node's dataclass: `name` and every registered backend's settings (one class per
    set of registered backends, so that its instances keep their class)."""
    entries = tuple(backends().values())
    names = tuple(e.name for e in entries)
    if names not in _classes:
        _classes[names] = _node_class_of(entries)
    return _classes[names]


def backend_node() -> Any:
    """The `backend` node of a config: every registered backend's settings at their defaults."""
    return backend_node_class()()


# ---- run folders -----------------------------------------------------------------------------------

def configuration_on(config: str, backend: str) -> str:
    """The configuration a run folder's name `config` stands for on `backend` (`hpa-80` for
    `hpa-80-flink` run on `flink`): the name without what that backend adds. For readers of tables
    aggregated over runs, which carry the backend of each row beside its name; a backend not
    registered in this process (a plug-in the reader does not load) leaves the name as it is."""
    known = backends().get(backend)
    return config.removesuffix(known.suffix) if known is not None and known.suffix else config


def run_configuration(manifest: "Manifest") -> str:
    """The configuration a run ran, without what its backend adds to the folder's name (`hpa-80` for
    the Flink run `hpa-80-flink`): the manifest's backend says what that is. For a backend that is
    not registered in this process, the one configuration of the resolved config that the name
    starts with."""
    if manifest.backend in backends():
        return configuration_on(manifest.config, manifest.backend)
    ran = (manifest.resolved_config.get("evaluation") or {}).get("configurations") or [{}]
    name = ran[0].get("name") if len(ran) == 1 and isinstance(ran[0], dict) else None
    return name if isinstance(name, str) and name and manifest.config.startswith(name) else manifest.config
