"""Typed operator parameters from ``OperatorContext.params``: a misspelt or mistyped key fails
when the instance starts, naming the operator and the key, not silently at the first item."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Type, TypeVar, get_type_hints

P = TypeVar("P")


class OperatorParamError(ValueError):
    def __init__(self, operator: str, key: str, message: str):
        super().__init__(f"{operator}.params.{key}: {message}")
        self.key = key


def parse_params(cls: Type[P], params: Mapping[str, Any], operator: str) -> P:
    """An instance of the dataclass ``cls`` from ``params``; unknown keys and wrong types fail."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(params) - names)
    if unknown:
        raise OperatorParamError(operator, unknown[0], f"unknown parameter; known: {', '.join(sorted(names))}")
    values = {}
    for name, value in params.items():
        values[name] = _coerce(hints[name], value, operator, name)
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if check is not None:
        problem = check()
        if problem:
            key, message = problem
            raise OperatorParamError(operator, key, message)
    return obj


def _coerce(hint: Any, value: Any, operator: str, key: str) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return value
    if hint is bool and isinstance(value, bool):
        return value
    origin = getattr(hint, "__origin__", None)
    if origin is not None and isinstance(value, Mapping):  # Mapping[str, float]
        _, value_type = hint.__args__
        return {str(k): _coerce(value_type, v, operator, f"{key}.{k}") for k, v in value.items()}
    raise OperatorParamError(operator, key, f"expected {getattr(hint, '__name__', hint)}, got {value!r}")
