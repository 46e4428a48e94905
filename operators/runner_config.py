"""Configuration of one operator instance, read from environment variables.

The live runtime starts each instance (a container) with these variables; ``python -m
operators.runner`` reads them here. Every error names the variable.

=================  ==========================================  ======================================
variable           meaning                                     default
=================  ==========================================  ======================================
OPERATOR           operator type, e.g. ``O3`` (required)
OPERATOR_IMPL      the implementation's name in the registry   ``OPERATOR`` (e.g. ``passthrough``)
RUN_PREFIX         the run's broker/Redis prefix (required)
TRANSPORT          ``rabbitmq`` or ``kafka``                   ``rabbitmq``
AMQP_URL           RabbitMQ URL                                ``amqp://guest:guest@127.0.0.1:5672/%2F``
KAFKA_BOOTSTRAP    Kafka bootstrap servers                     ``127.0.0.1:9092``
REDIS_URL          Redis URL (metrics, operator state)         ``redis://127.0.0.1:6379/0``
INSTANCE_ID        this instance's id                          ``<OPERATOR>-<hostname>-<pid>``
PREFETCH           unacknowledged inputs per input queue       ``5``
PARALLEL           items processed at once by the instance     ``1``
SAMPLE_EVERY       every n-th processed item gives a sample    ``10``
SAMPLING           ``every_nth`` (every SAMPLE_EVERY-th item)  ``every_nth``
                   | ``probabilistic`` (each item with
                   probability 1/SAMPLE_EVERY, seeded by
                   RUN_PREFIX and INSTANCE_ID)
MEASUREMENT        ``milliseconds`` | ``seconds_truncated``    ``milliseconds``
WORK_MS            emulated work per item (a sleep), ms        ``0``
ITEM_TIMEOUT_S     inputs whose origin is older than this      ``0`` (no timeout)
                   when taken are dropped unprocessed, s
OPERATOR_PARAMS    JSON object handed to the operator          ``{}``
TOPOLOGY           JSON ``{"sources": {name: [downstream]},    the OEE topology
                   "operators": {name: [downstream]}}``
DEDUP_TTL_S        how long finished input ids are remembered  ``3600`` (``0``: no deduplication)
METRICS_FLUSH_S    counters are written this often, s          ``1``
DRAIN_TIMEOUT_S    SIGTERM: longest wait for held items, s     ``60``
ACTIVATION_POLL_S  how often the pool activation flag           ``0.5`` (``0``: no pool activation,
                   ``<prefix>:active:<instance>`` is read, s    always active, no state reports)
OPERATOR_FACTORY   ``module:callable`` building the operator   ``operators.registry:make_operator``
EMULATION_HOST     the host this instance runs on: the          empty (no emulation: shared queues)
                   emulated network (operators/netem.py), own
                   queues, delays and losses (RabbitMQ only)
EMULATION_SEED     seed of the instance's delay and loss draws  ``1``
=================  ==========================================  ======================================
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from operators.topology import oee_topology
from operators.wiring import Wiring, WiringError, make_wiring

TRANSPORTS = ("rabbitmq", "kafka")
MEASUREMENTS = ("milliseconds", "seconds_truncated")
SAMPLINGS = ("every_nth", "probabilistic")  # testbed.config.Sampling
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_FACTORY = "operators.registry:make_operator"


class ConfigError(ValueError):
    """A missing or unusable setting; ``variable`` names the environment variable."""

    def __init__(self, variable: str, message: str):
        super().__init__(f"{variable}: {message}")
        self.variable = variable


@dataclass(frozen=True)
class RunnerConfig:
    operator: str
    prefix: str
    transport: str = "rabbitmq"
    amqp_url: str = DEFAULT_AMQP_URL
    kafka_bootstrap: str = DEFAULT_KAFKA_BOOTSTRAP
    redis_url: str = DEFAULT_REDIS_URL
    instance_id: str = ""
    prefetch: int = 5
    parallel: int = 1
    sample_every: int = 10
    sampling: str = "every_nth"
    measurement: str = "milliseconds"
    work_ms: float = 0.0
    item_timeout_s: float = 0.0  # > 0: inputs older than this (origin_ms) are dropped when taken
    params: Mapping[str, Any] = field(default_factory=dict)
    topology: Mapping[str, Mapping[str, List[str]]] = field(default_factory=oee_topology)
    dedup_ttl_s: int = 3600
    metrics_flush_s: float = 1.0
    drain_timeout_s: float = 60.0
    activation_poll_s: float = 0.5
    factory: str = DEFAULT_FACTORY
    implementation: str = ""  # registry name; empty: the operator type's own
    emulation_host: str = ""  # non-empty: the emulated network, this instance on that host
    emulation_seed: int = 1

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError("TRANSPORT", f"{self.transport!r} is not one of {', '.join(TRANSPORTS)}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError("SAMPLING", f"{self.sampling!r} is not one of {', '.join(SAMPLINGS)}")
        if self.measurement not in MEASUREMENTS:
            raise ConfigError("MEASUREMENT", f"{self.measurement!r} is not one of {', '.join(MEASUREMENTS)}")
        for var, value, low in (("PREFETCH", self.prefetch, 1), ("PARALLEL", self.parallel, 1),
                                ("SAMPLE_EVERY", self.sample_every, 1), ("DEDUP_TTL_S", self.dedup_ttl_s, 0)):
            if value < low:
                raise ConfigError(var, f"must be at least {low}, got {value}")
        for var, amount in (("WORK_MS", self.work_ms), ("ITEM_TIMEOUT_S", self.item_timeout_s),
                           ("METRICS_FLUSH_S", self.metrics_flush_s),
                           ("DRAIN_TIMEOUT_S", self.drain_timeout_s),
                           ("ACTIVATION_POLL_S", self.activation_poll_s)):
            if amount < 0:
                raise ConfigError(var, f"must not be negative, got {amount}")
        if self.emulation_host and self.transport != "rabbitmq":
            raise ConfigError("EMULATION_HOST", "the emulated network needs TRANSPORT=rabbitmq (per-instance queues)")
        if ":" not in self.factory:
            raise ConfigError("OPERATOR_FACTORY", f"{self.factory!r} is not 'module:callable'")
        try:
            wiring = self.wiring()
        except WiringError as exc:
            var = "RUN_PREFIX" if exc.key == "prefix" else "TOPOLOGY"
            raise ConfigError(var, str(exc)) from exc
        if self.operator not in wiring.operators:
            raise ConfigError("OPERATOR", f"{self.operator!r} is not an operator of the topology "
                                          f"({', '.join(wiring.operators)})")
        if not wiring.inputs(self.operator):
            raise ConfigError("OPERATOR", f"{self.operator!r} has no input edge in the topology")

    def wiring(self) -> Wiring:
        return make_wiring(self.topology.get("sources", {}), self.topology.get("operators", {}), self.prefix)

    @property
    def impl(self) -> str:
        return self.implementation or self.operator

    @property
    def instance(self) -> str:
        return self.instance_id or f"{self.operator}-{socket.gethostname()}-{os.getpid()}"


def _int(env: Mapping[str, str], var: str, default: int) -> int:
    raw = env.get(var, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(var, f"expected an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], var: str, default: float) -> float:
    raw = env.get(var, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(var, f"expected a number, got {raw!r}") from None


def _json_object(env: Mapping[str, str], var: str) -> Optional[Dict[str, Any]]:
    raw = env.get(var, "").strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(var, f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(var, f"expected a JSON object, got {type(value).__name__}")
    return value


def _topology(env: Mapping[str, str]) -> Dict[str, Dict[str, List[str]]]:
    value = _json_object(env, "TOPOLOGY")
    if value is None:
        return oee_topology()
    unknown = set(value) - {"sources", "operators"}
    if unknown:
        raise ConfigError("TOPOLOGY", f"unknown keys {sorted(unknown)} (expected 'sources' and 'operators')")
    out: Dict[str, Dict[str, List[str]]] = {}
    for part in ("sources", "operators"):
        table = value.get(part, {})
        if not isinstance(table, dict):
            raise ConfigError("TOPOLOGY", f"{part!r} must map names to lists of downstream operators")
        for name, downstream in table.items():
            if not isinstance(downstream, list) or not all(isinstance(d, str) for d in downstream):
                raise ConfigError("TOPOLOGY", f"{part}.{name} must be a list of operator names, got {downstream!r}")
        out[part] = {k: list(v) for k, v in table.items()}
    return out


def _required(env: Mapping[str, str], var: str) -> str:
    raw = env.get(var, "").strip()
    if not raw:
        raise ConfigError(var, "is required")
    return raw


def config_from_env(env: Optional[Mapping[str, str]] = None) -> RunnerConfig:
    env = os.environ if env is None else env
    return RunnerConfig(
        operator=_required(env, "OPERATOR"),
        prefix=_required(env, "RUN_PREFIX"),
        transport=env.get("TRANSPORT", "").strip() or "rabbitmq",
        amqp_url=env.get("AMQP_URL", "").strip() or DEFAULT_AMQP_URL,
        kafka_bootstrap=env.get("KAFKA_BOOTSTRAP", "").strip() or DEFAULT_KAFKA_BOOTSTRAP,
        redis_url=env.get("REDIS_URL", "").strip() or DEFAULT_REDIS_URL,
        instance_id=env.get("INSTANCE_ID", "").strip(),
        prefetch=_int(env, "PREFETCH", 5),
        parallel=_int(env, "PARALLEL", 1),
        sample_every=_int(env, "SAMPLE_EVERY", 10),
        sampling=env.get("SAMPLING", "").strip() or "every_nth",
        measurement=env.get("MEASUREMENT", "").strip() or "milliseconds",
        work_ms=_float(env, "WORK_MS", 0.0),
        item_timeout_s=_float(env, "ITEM_TIMEOUT_S", 0.0),
        params=_json_object(env, "OPERATOR_PARAMS") or {},
        topology=_topology(env),
        dedup_ttl_s=_int(env, "DEDUP_TTL_S", 3600),
        metrics_flush_s=_float(env, "METRICS_FLUSH_S", 1.0),
        drain_timeout_s=_float(env, "DRAIN_TIMEOUT_S", 60.0),
        activation_poll_s=_float(env, "ACTIVATION_POLL_S", 0.5),
        factory=env.get("OPERATOR_FACTORY", "").strip() or DEFAULT_FACTORY,
        implementation=env.get("OPERATOR_IMPL", "").strip(),
        emulation_host=env.get("EMULATION_HOST", "").strip(),
        emulation_seed=_int(env, "EMULATION_SEED", 1),
    )
