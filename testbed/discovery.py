"""How registries find what registers itself (policies, placement strategies), without a hand-kept
list.

Three sources, in this order:

1. the modules of the project's own package (`testbed.policies`, `testbed.placement`,
   `reporting.evaluations`) whose source applies the registering function at the start of a line, as
   a decorator (`@register_policy(`) or in an assignment (`ENTRY = register_report(`); only those are
   imported, so discovery costs no import of unrelated modules;
2. the entry points of installed distributions in the group `testbed.policies` or
   `testbed.placements` (the value is the module to import, e.g.
   `my_policy = "my_package.my_policy"` under `[project.entry-points."testbed.policies"]`);
3. the environment: `TESTBED_POLICY_MODULES` or `TESTBED_PLACEMENT_MODULES`, dotted module names
   separated by commas (modules on the Python path that are not installed as a distribution;
   worker processes inherit the variable).

A module registers what it defines when it is imported; discovery only imports it. A module that
cannot be imported, or that registers a name another module registered (a plug-in would otherwise
silently replace a built-in), stops discovery with a `PluginError` naming the module, where it was
named and why, in one line.
"""
from __future__ import annotations

import importlib
import os
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from testbed.messages import one_line

# per process: the package's files and the installed distributions do not change while it runs
_scanned: Dict[Tuple[str, str], Tuple[str, ...]] = {}
_entry_points: Dict[str, Tuple[Tuple[str, str], ...]] = {}


class PluginError(Exception):
    """A module discovery cannot use (one line for the user: the module, who named it, the error)."""


def registering_modules(package: str, decorator: str) -> Tuple[str, ...]:
    """The modules below `package` (its folder, recursively) that apply `decorator` at the start of a line
    (`@decorator(`, `decorator(`, `NAME = decorator(`)."""
    key = (package, decorator)
    if key not in _scanned:
        module_file = importlib.import_module(package).__file__
        assert module_file is not None, f"{package} is a namespace package"
        root = Path(module_file).parent
        marker = re.compile(rf"^(?:@|[A-Za-z_]\w* = )?{re.escape(decorator)}\(", re.MULTILINE)
        found: List[str] = []
        for path in sorted(root.rglob("*.py")):
            if marker.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(root).with_suffix("").parts
                found.append(".".join((package,) + tuple(p for p in parts if p != "__init__")))
        _scanned[key] = tuple(found)
    return _scanned[key]


def _entry_point_source(group: str, name: str, value: str, dist: Optional[str]) -> str:
    return f"entry point {name} = {value} (group {group}{f', distribution {dist}' if dist else ''})"


def external_modules(group: str, variable: str) -> List[Tuple[str, str]]:
    """(module, who named it) of the installed distributions' entry points (group) and the environment
    (variable)."""
    if group not in _entry_points:
        _entry_points[group] = tuple(
            (ep.value.split(":")[0].strip(),
             _entry_point_source(group, ep.name, ep.value, ep.dist.name if ep.dist is not None else None))
            for ep in entry_points(group=group))
    names = list(_entry_points[group])
    names += [(m.strip(), variable) for m in os.environ.get(variable, "").split(",") if m.strip()]
    return names


def _import(name: str, source: str) -> None:
    try:
        importlib.import_module(name)
    except PluginError as exc:
        raise PluginError(f"{source} names module {name!r}: {exc}") from exc
    except Exception as exc:  # whatever the module raises on import: named, not a traceback
        raise PluginError(f"{source} names module {name!r}, which cannot be imported: "
                          f"{type(exc).__name__}: {one_line(exc)}") from exc


def discover(package: str, decorator: str, group: str, variable: str) -> None:
    """Import every module that registers something of this kind (see the module's docstring);
    PluginError for one that cannot be imported."""
    seen: Set[str] = set()
    own = [(m, f"package {package}") for m in registering_modules(package, decorator)]
    for name, source in (*own, *external_modules(group, variable)):
        if name not in seen:
            seen.add(name)
            _import(name, source)


def _owner(module: str) -> str:
    return f"the built-in module {module}" if module.split(".")[0] == "testbed" else f"module {module}"


def claim(kind: str, name: str, module: str, registered_by: Optional[str]) -> None:
    """Let `module` register `name` unless another module did (`registered_by`; None: nobody): a
    second registration would silently replace the first. The same module may register again (a
    reload)."""
    if registered_by is not None and registered_by != module:
        raise PluginError(f"{kind} {name!r} of module {module} is registered already by {_owner(registered_by)}: "
                          f"give it another name")
