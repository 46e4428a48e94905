"""A config node made of registered plug-ins' settings (the `backend` and `placement` nodes): one
dataclass with the shared keys, a field per plug-in that keeps its settings under a key of its own,
and as bases the settings of those whose keys sit directly in the node."""
from __future__ import annotations

import dataclasses
from dataclasses import field, make_dataclass
from typing import Any, Callable, Dict, Sequence, Tuple


def node_class(name: str, shared: type, flat: Sequence[type], keyed: Sequence[Tuple[str, type]],
               rebuild: Callable[[Dict[str, Any]], Any], module: str) -> type:
    """The node's dataclass. The flat settings are bases, so their fields keep their own module's
    types; an instance pickles by value through `rebuild` (a module-level function making it again
    of the reading process's class), so worker processes need not have made the same class."""

    def reduce(self: Any) -> Tuple[Callable[[Dict[str, Any]], Any], Tuple[Dict[str, Any]]]:
        return rebuild, ({f.name: getattr(self, f.name) for f in dataclasses.fields(self)},)

    fields = [(key, settings, field(default_factory=settings)) for key, settings in keyed]
    cls = make_dataclass(name, fields, bases=(*flat, shared), namespace={"__reduce__": reduce})
    cls.__module__ = module
    return cls
