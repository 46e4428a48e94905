"""The simulator's unknowns of one evaluation as a search space over config keys.

Each evaluation declares its space under `evaluation.fidelity.parameters` (testbed.fidelity_spec):
a parameter sets one or more keys of the experiment config and is searched within bounds chosen
from what the paper and its authors' system say about it. Values are rounded to three significant
digits before use, so a written profile holds exactly the values that were evaluated.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from testbed.fidelity_spec import FidelityParameter, round3

__all__ = ["FidelityParameter", "config_values", "current_values", "literal", "round3", "to_overrides"]


def _by_name(space: Sequence[FidelityParameter]) -> Dict[str, FidelityParameter]:
    return {p.name: p for p in space}


def config_values(values: Mapping[str, Any], space: Sequence[FidelityParameter]) -> Dict[str, Any]:
    """Config key -> value for a full or partial assignment of the search space."""
    by_name = _by_name(space)
    out: Dict[str, Any] = {}
    for name, value in values.items():
        out.update(by_name[name].config_values(value))
    return out


def to_overrides(values: Mapping[str, Any], space: Sequence[FidelityParameter],
                 fixed: Mapping[str, Any] | None = None) -> List[str]:
    """Hydra command-line overrides for an assignment plus the measured values (lists as [a,b],
    booleans lower case), sorted by key."""
    keys = {**(fixed or {}), **config_values(values, space)}
    return [f"{key}={literal(v)}" for key, v in sorted(keys.items())]


def literal(v: Any) -> str:
    """A value as Hydra override syntax."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(literal(x) for x in v) + "]"
    return str(v)


def current_values(cfg: Any, space: Sequence[FidelityParameter] | None = None) -> Dict[str, Any]:
    """The search-space values a resolved config holds (first key of each parameter; the upper end
    of a range), clipped to the parameter's bounds. `cfg` is an ExperimentConfig; the space is its
    evaluation's unless given."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(cfg)
    out: Dict[str, Any] = {}
    for p in cfg.evaluation.fidelity.parameters if space is None else space:
        value = p.value_of(OmegaConf.select(node, p.keys[0]))
        if p.kind == "categorical":
            value = getattr(value, "value", value)
            out[p.name] = value if value in p.choices else p.choices[0]
        elif p.kind == "int":
            out[p.name] = int(min(max(value, p.low), p.high))
        else:
            out[p.name] = round3(min(max(float(value), p.low), p.high))
    return out
