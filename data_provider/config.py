"""Typed configuration of a data-provider run (`testbed provider run`), a Hydra structured config.

The composition root is `experiments/conf/provider.yaml`: the same `pattern` and `topology` groups
as the experiments, plus the provider's own keys. An unknown key or a value of the wrong type fails
at composition, naming the key; ``validate_provider`` adds the semantic checks, again naming it.

Broker endpoints come from the environment unless set: ``AMQP_URL`` (default
``amqp://guest:guest@127.0.0.1:5672/%2F``) and ``KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from testbed.config import CONF_DIR, ConfigError, TopologyConfig
from testbed.workloads.patterns import PatternConfig, PatternError, kind_settings, pattern_node, validate_pattern
from testbed.workloads.payloads import KINDS, PayloadConfig, PayloadConfigError, validate_payloads

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
CONFIG_NAME = "provider"
SCHEMA_NAME = "provider_schema"


class TransportName(str, Enum):
    rabbitmq = "rabbitmq"
    kafka = "kafka"
    memory = "memory"  # nothing leaves the process (dry runs, tests)


def _default_kinds() -> Dict[str, str]:
    return {"S1_availability": "availability", "S2_production": "production", "S3_temperature": "temperature",
            "S": "availability"}  # S: the PRESPS chain's source (pass-through operators: the payload is not read)


@dataclass
class ProviderConfig:
    pattern: PatternConfig = field(default_factory=pattern_node)  # flat: every workload kind's keys
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    payloads: PayloadConfig = field(default_factory=PayloadConfig)
    transport: TransportName = TransportName.rabbitmq
    duration: str = "10m"  # "90s", "10m", "1.5h" or plain seconds
    seed: int = 1
    out: str = "runs/provider"  # the load table goes to <out>/<pattern>/<run_id>/
    run_id: str = ""  # "" = <pattern>-<UTC time>
    prefix: str = ""  # broker names <prefix>.<source>...; "" = the run id
    amqp_url: str = ""  # "" = $AMQP_URL or DEFAULT_AMQP_URL
    kafka_bootstrap: str = ""  # "" = $KAFKA_BOOTSTRAP or DEFAULT_KAFKA_BOOTSTRAP
    kafka_partitions: int = 1
    declare: bool = True  # declare exchanges, edge queues and dead-letter queues (topics for Kafka)
    kinds: Dict[str, str] = field(default_factory=_default_kinds)  # source -> payload kind
    max_machines: int = 64  # refuse patterns asking for more (a typo guard)
    max_unconfirmed: int = 50_000  # RabbitMQ: back-pressure beyond this many outstanding messages
    image_compress_level: int = 3  # PNG zlib level of the display images
    checkpoint_s: float = 30.0  # the load table is rewritten this often during a run
    connect_timeout_s: float = 30.0
    flush_timeout_s: float = 60.0  # at the end: wait this long for outstanding confirms


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=ProviderConfig)


def to_typed(cfg: DictConfig | ProviderConfig) -> ProviderConfig:
    if isinstance(cfg, ProviderConfig):
        return cfg
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, ProviderConfig)
    try:  # the flat node as its kind's own settings
        obj.pattern = kind_settings(obj.pattern)
    except PatternError as exc:
        raise ConfigError(f"pattern.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from exc
    return obj


def to_plain(cfg: ProviderConfig) -> dict:
    plain = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
    assert isinstance(plain, dict)
    plain["amqp_url"] = re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", amqp_url(cfg))  # no passwords in manifests
    plain["kafka_bootstrap"] = kafka_bootstrap(cfg)
    return plain


def compose_provider(overrides: List[str]) -> ProviderConfig:
    """The typed, validated config of `experiments/conf/provider.yaml` with Hydra overrides."""
    from hydra import compose, initialize_config_dir

    register()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return validate_provider(to_typed(compose(CONFIG_NAME, overrides=list(overrides))))


def amqp_url(cfg: ProviderConfig) -> str:
    return cfg.amqp_url or os.environ.get("AMQP_URL") or DEFAULT_AMQP_URL


def kafka_bootstrap(cfg: ProviderConfig) -> str:
    return cfg.kafka_bootstrap or os.environ.get("KAFKA_BOOTSTRAP") or DEFAULT_KAFKA_BOOTSTRAP


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str, key: str = "duration") -> float:
    """Seconds of "90s", "10m", "1.5h", "500ms" or a plain number of seconds."""
    m = _DURATION_RE.match(str(text))
    if not m:
        raise ConfigError(key, f"{text!r} is not a duration (e.g. 90s, 10m, 1.5h)")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not seconds > 0:
        raise ConfigError(key, f"must be > 0, got {text!r}")
    return seconds


def validate_provider(cfg: ProviderConfig) -> ProviderConfig:
    from operators.wiring import PREFIX_RE

    try:
        validate_pattern(cfg.pattern)
    except PatternError as exc:
        raise ConfigError(f"pattern.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from exc
    try:
        validate_payloads(cfg.payloads)
    except PayloadConfigError as exc:
        raise ConfigError(exc.key, str(exc).removeprefix(f"{exc.key}: ")) from exc
    parse_duration(cfg.duration)
    topo = cfg.topology
    if not topo.tick_ms > 0:
        raise ConfigError("topology.tick_ms", f"must be > 0, got {topo.tick_ms}")
    if not topo.sources:
        raise ConfigError("topology.sources", "no sources defined (compose a topology, e.g. topology=oee)")
    for name, src in topo.sources.items():
        if name not in cfg.kinds:
            raise ConfigError("kinds", f"no payload kind for source {name!r} (kinds: {', '.join(KINDS)})")
        if src.items_per_tick < 0:
            raise ConfigError(f"topology.sources.{name}.items_per_tick", f"must be >= 0, got {src.items_per_tick}")
        for d in src.downstream:
            if d not in topo.operators:
                raise ConfigError(f"topology.sources.{name}.downstream", f"unknown operator {d!r}")
    for name, kind in cfg.kinds.items():
        if kind not in KINDS:
            raise ConfigError(f"kinds.{name}", f"unknown payload kind {kind!r}; known: {', '.join(KINDS)}")
    for key in ("run_id", "prefix"):
        value = getattr(cfg, key)
        if value and not PREFIX_RE.match(value):
            raise ConfigError(key, f"{value!r} must be 1-100 letters, digits, '_' or '-'")
    if cfg.seed < 0:
        raise ConfigError("seed", f"must be >= 0, got {cfg.seed}")
    for key in ("max_machines", "max_unconfirmed", "kafka_partitions"):
        if getattr(cfg, key) < 1:
            raise ConfigError(key, f"must be >= 1, got {getattr(cfg, key)}")
    if not 0 <= cfg.image_compress_level <= 9:
        raise ConfigError("image_compress_level", f"must be in 0..9, got {cfg.image_compress_level}")
    for key in ("checkpoint_s", "connect_timeout_s", "flush_timeout_s"):
        if not getattr(cfg, key) > 0:
            raise ConfigError(key, f"must be > 0, got {getattr(cfg, key)}")
    url = amqp_url(cfg)
    if cfg.transport == TransportName.rabbitmq and not url.startswith(("amqp://", "amqps://")):
        raise ConfigError("amqp_url", f"must start with amqp:// or amqps:// (from AMQP_URL?), got {url!r}")
    if cfg.transport == TransportName.kafka and not kafka_bootstrap(cfg).strip():
        raise ConfigError("kafka_bootstrap", "must not be empty")
    return cfg

