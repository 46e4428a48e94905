"""key=value arguments of the commands that take them (`testbed calibrate`, `fidelity`, `odp`,
`report`) and the error that names a bad key, of those arguments and of the experiment config
(testbed.config) alike: a dataclass config filled from its arguments, the pairs of a table of known
keys, and the typed values they take."""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Type, TypeVar, Union

T = TypeVar("T")


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the offending key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


class UsageError(ValueError):
    """A bad argument of a command that takes a table of known keys (`parse_pairs`)."""


# ---- a dataclass config from key=value arguments ----------------------------------------------

def parse_arguments(schema: Type[T], args: Sequence[str]) -> T:
    """The dataclass `schema` with `args` (dotted keys) merged in; ConfigError naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    for a in args:
        if "=" not in a:
            raise ConfigError(a, "expected key=value")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.from_dotlist(list(args)))
    except OmegaConfBaseException as exc:
        raise ConfigError(str(getattr(exc, "full_key", "") or "arguments"), str(exc).splitlines()[0]) from exc
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, schema)
    return cfg


def parse_command(schema: Type[T], argv: Optional[Sequence[str]], usage: str) -> Union[T, int]:
    """A command's validated config from argv (default sys.argv[1:]), or its exit code: 0 after
    printing the usage for -h/--help, 2 after printing a config error naming the key."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(usage, file=sys.stderr)
        return 0
    try:
        return parse_arguments(schema, args).validate()  # type: ignore[attr-defined]
    except ConfigError as exc:
        return config_error(exc)


def config_error(exc: ConfigError) -> int:
    """Print a config error (one line, naming the key) and return a command's exit status for it, 2."""
    print(f"config error: {exc}", file=sys.stderr)
    return 2


# ---- the pairs of a table of known keys ---------------------------------------------------------

def parse_pairs(args: List[str], parsers: Dict[str, Callable[[str], object]]) -> Dict[str, object]:
    """{key: parsers[key](value)} of `key=value` arguments; UsageError for an argument without `=`,
    an unknown key or a value its parser refuses (ValueError)."""
    out: Dict[str, object] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise UsageError(f"expected key=value, not {arg!r}")
        if key not in parsers:
            raise UsageError(f"unknown key {key!r} (known: {', '.join(sorted(parsers))})")
        try:
            out[key] = parsers[key](value)
        except ValueError as exc:
            raise UsageError(f"{key}: {exc}") from None
    return out


# ---- typed values -----------------------------------------------------------------------------

def as_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, not {text}")
    return value


def count(text: str) -> int:
    """A number of things (threads, seeds): an integer >= 1."""
    value = int(text)
    if value < 1:
        raise ValueError(f"must be >= 1, not {text}")
    return value


def flatten(node: Mapping[Any, Any], prefix: str = "") -> Dict[str, Any]:
    """Dotted key -> leaf value of a nested mapping."""
    out: Dict[str, Any] = {}
    for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
