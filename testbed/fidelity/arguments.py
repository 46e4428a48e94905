"""key=value command-line arguments into a dataclass config; a bad key or value names the key."""
from __future__ import annotations

from typing import Sequence, Type, TypeVar

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
