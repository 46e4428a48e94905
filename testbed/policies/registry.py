"""The policy registry: a name maps to a policy class, its typed parameters and how it is billed.

Adding a policy is its module (a class decorated with `register_policy`), its YAML in
`experiments/conf/policy/` and its tests; the configuration schema (`policies.<name>.*`), the
evaluations and the reports pick it up from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Protocol, Type

from testbed.model import Action, Snapshot
from testbed.placement.base import Placement


class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> List[Action]:
        """Never sleeps, reads a clock or does I/O: everything it needs is in the snapshot (and in
        state derived from earlier snapshots)."""
        ...


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    cls: Callable[[Any, Placement], Policy]  # (params, placement) -> policy
    params: Type[Any]  # a dataclass; its defaults are the paper's values
    billing: str  # "own": billed by the BTU length it runs with; "rebill": BTU-agnostic, re-billed
    placement: str  # its default placement strategy


_REGISTRY: Dict[str, PolicyEntry] = {}


def register_policy(name: str, params: Type[Any], billing: str = "rebill", placement: str = "first_fit"):
    """Class decorator: make a policy known under `name`."""
    if billing not in ("own", "rebill"):
        raise ValueError(f"billing must be 'own' or 'rebill', got {billing!r}")

    def add(cls):
        cls.name = name
        _REGISTRY[name] = PolicyEntry(name, cls, params, billing, placement)
        return cls

    return add


def policies() -> Dict[str, PolicyEntry]:
    """Every registered policy by name (the built-in ones are loaded on first use)."""
    _load_builtins()
    return dict(sorted(_REGISTRY.items()))


def policy_entry(name: str) -> PolicyEntry:
    known = policies()
    if name not in known:
        raise KeyError(f"unknown policy {name!r}; registered: {sorted(known)}")
    return known[name]


def make_policy(name: str, params: Any, placement: Placement) -> Policy:
    return policy_entry(name).cls(params, placement)


def _load_builtins() -> None:
    from testbed.policies import btu, threshold  # noqa: F401  (they register themselves)
    from testbed.policies import hpa, static_n  # noqa: F401  (Kubernetes' HPA, n static workers)
    from testbed.policies.daedalus import policy as _daedalus  # noqa: F401  (Daedalus)
    from testbed.policies import static  # noqa: F401  (a fixed deployment: the ODP experiments)
    from testbed.policies import dabs, presps  # noqa: F401  (PRESPS and its DABS-like baseline)
