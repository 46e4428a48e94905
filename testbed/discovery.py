"""How registries find what registers itself (policies, placement strategies), without a hand-kept
list.

Three sources, in this order:

1. the modules of the testbed's own package (`testbed.policies`, `testbed.placement`) whose source
   applies the registering decorator (`@register_policy(`, `@register_placement(`) at the start of
   a line; only those are imported, so discovery costs no import of unrelated modules;
2. the entry points of installed distributions in the group `testbed.policies` or
   `testbed.placements` (the value is the module to import, e.g.
   `my_policy = "my_package.my_policy"` under `[project.entry-points."testbed.policies"]`);
3. the environment: `TESTBED_POLICY_MODULES` or `TESTBED_PLACEMENT_MODULES`, dotted module names
   separated by commas (modules on the Python path that are not installed as a distribution;
   worker processes inherit the variable).

A module registers what it defines when it is imported; discovery only imports it.
"""
from __future__ import annotations

import importlib
import os
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Dict, List, Set, Tuple

# per process: the package's files and the installed distributions do not change while it runs
_scanned: Dict[Tuple[str, str], Tuple[str, ...]] = {}
_entry_points: Dict[str, Tuple[str, ...]] = {}


def registering_modules(package: str, decorator: str) -> Tuple[str, ...]:
    """The modules below `package` (its folder, recursively) that apply `@decorator(` at the start of a line."""
    key = (package, decorator)
    if key not in _scanned:
        module_file = importlib.import_module(package).__file__
        assert module_file is not None, f"{package} is a namespace package"
        root = Path(module_file).parent
        marker = re.compile(rf"^@{re.escape(decorator)}\(", re.MULTILINE)
        found: List[str] = []
        for path in sorted(root.rglob("*.py")):
            if marker.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(root).with_suffix("").parts
                found.append(".".join((package,) + tuple(p for p in parts if p != "__init__")))
        _scanned[key] = tuple(found)
    return _scanned[key]


def external_modules(group: str, variable: str) -> List[str]:
    """The modules the installed distributions' entry points (group) and the environment (variable) name."""
    if group not in _entry_points:
        _entry_points[group] = tuple(ep.value.split(":")[0].strip() for ep in entry_points(group=group))
    names = list(_entry_points[group])
    names += [m.strip() for m in os.environ.get(variable, "").split(",") if m.strip()]
    return names


def discover(package: str, decorator: str, group: str, variable: str) -> None:
    """Import every module that registers something of this kind (see the module's docstring)."""
    seen: Set[str] = set()
    for name in (*registering_modules(package, decorator), *external_modules(group, variable)):
        if name not in seen:
            seen.add(name)
            importlib.import_module(name)
