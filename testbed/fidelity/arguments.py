"""key=value command-line arguments into a dataclass config; a bad key or value names the key."""
from __future__ import annotations

import sys
from typing import Optional, Sequence, Type, TypeVar, Union

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from testbed.config import ConfigError

T = TypeVar("T")


def parse_arguments(schema: Type[T], args: Sequence[str]) -> T:
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
        print(f"config error: {exc}", file=sys.stderr)
        return 2
