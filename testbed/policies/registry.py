"""The policy registry: a name maps to a policy class, its typed parameters and how it is billed.

A policy registers itself when its module is imported (a `Policy` subclass decorated with
`register_policy`); the registry finds the modules (testbed/discovery.py): those of this package
that apply the decorator, the entry points of the group `testbed.policies`, and the modules named by
`TESTBED_POLICY_MODULES`. The configuration schema (`policies.<name>.*`), the `policy=<name>`
options, the evaluations and the reports pick the policies up from here.
"""
from __future__ import annotations

from dataclasses import dataclass, is_dataclass
from typing import Any, Callable, Dict, Type, TypeVar

from testbed.discovery import claim, discover
from testbed.placement.base import Placement
from testbed.policies.contract import Policy

PolicyClass = TypeVar("PolicyClass", bound=type)

__all__ = ["Policy", "PolicyEntry", "make_policy", "policies", "policy_entry", "register_policy"]

ENTRY_POINT_GROUP = "testbed.policies"
MODULES_VARIABLE = "TESTBED_POLICY_MODULES"


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    cls: Callable[[Any, Placement], Policy]  # (params, placement) -> policy
    params: Type[Any]  # a dataclass; its defaults are the paper's values, its time fields marked (contract.time_field)
    billing: str  # "own": billed by the BTU length it runs with; "rebill": BTU-agnostic, re-billed
    placement: str  # its default placement strategy


_REGISTRY: Dict[str, PolicyEntry] = {}


def register_policy(name: str, params: Type[Any], billing: str = "rebill",
                    placement: str = "first_fit") -> Callable[[PolicyClass], PolicyClass]:
    """Class decorator: make a policy (a `Policy` subclass) known under `name`."""
    if billing not in ("own", "rebill"):
        raise ValueError(f"billing must be 'own' or 'rebill', got {billing!r}")
    if not is_dataclass(params):
        raise TypeError(f"policy {name!r}: its parameters must be a dataclass, got {params!r}")

    def add(cls: PolicyClass) -> PolicyClass:
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            raise TypeError(f"policy {name!r}: {cls!r} must subclass testbed.policies.contract.Policy")
        known = _REGISTRY.get(name)
        claim("policy", name, cls.__module__, known.cls.__module__ if known is not None else None)
        cls.name = name
        _REGISTRY[name] = PolicyEntry(name, cls, params, billing, placement)
        return cls

    return add


def policies() -> Dict[str, PolicyEntry]:
    """Every registered policy by name (found and imported on first use)."""
    discover("testbed.policies", "register_policy", ENTRY_POINT_GROUP, MODULES_VARIABLE)
    return dict(sorted(_REGISTRY.items()))


def policy_entry(name: str) -> PolicyEntry:
    known = policies()
    if name not in known:
        raise KeyError(f"unknown policy {name!r}; registered: {sorted(known)}")
    return known[name]


def make_policy(name: str, params: Any, placement: Placement) -> Policy:
    return policy_entry(name).cls(params, placement)
