"""The live testbed (`backend=docker`, testbed/live): operator containers on logical hosts of Docker
engines, RabbitMQ or Kafka between them, Redis for state and metrics (operator mode); keyed worker
containers on RabbitMQ (job mode, its times compressed by `backend.live.job.time_compression`). Its
settings are `backend.live`; its runs are named `<configuration>-live` and sit beside their
simulated twins."""
from __future__ import annotations

from typing import Any

from testbed.arguments import ConfigError
from testbed.backend_registry import Backend, RunInputs, register_backend
from testbed.config import EmissionMode, TopologyConfig
from testbed.emulation import AvailabilityMode
from testbed.live_config import LiveConfig, TransportName
from testbed.run_result import RunResult
from testbed.workloads.payloads import PayloadConfigError, validate_payloads


@register_backend("docker", LiveConfig, key="live", suffix="-live", shares_machine=True, twin=True,
                  emission="live")
class LiveTestbed(Backend):
    def validate(self, cfg: Any) -> None:
        if cfg.job.enabled:
            _validate_job(cfg)
        _validate_live(cfg)
        _validate_network(cfg)

    def time_compression(self, cfg: Any) -> float:
        return float(cfg.backend.live.job.time_compression)

    def run(self, run: RunInputs) -> RunResult:
        if run.mode == "job":
            from testbed.live.job import LiveJobRun  # keyed worker containers

            return LiveJobRun(run.cfg, run.policy, run.pattern, run.seed, run.run_id, run.run_dir).run()
        from testbed.live.run import LiveRun

        return LiveRun(run.cfg, run.policy, run.pattern, run.seed, run.btu_minutes, run.run_id, run.run_dir).run()


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(key, f"must be > 0, got {value}")


def _validate_live(cfg: Any) -> None:
    live = cfg.backend.live
    if not live.engines:
        raise ConfigError("backend.live.engines", "at least one Docker engine is needed")
    for i, engine in enumerate(live.engines):
        if engine.url.split("://", 1)[0] not in ("unix", "tcp", "ssh", "http", "https"):
            raise ConfigError(f"backend.live.engines[{i}].url",
                              f"{engine.url!r} is not a Docker engine URL (unix://, tcp://, ssh://)")
        _positive(f"backend.live.engines[{i}].max_hosts", engine.max_hosts)
    for key in ("amqp_url", "redis_url", "management_url"):
        if "://" not in getattr(live, key):
            raise ConfigError(f"backend.live.{key}", f"{getattr(live, key)!r} is not a URL")
    _positive("backend.live.prefetch", live.prefetch)
    _positive("backend.live.kafka_partitions", live.kafka_partitions)
    _positive("backend.live.parallel", live.parallel)
    if live.stop_timeout_s < 0:
        raise ConfigError("backend.live.stop_timeout_s", "must be >= 0")
    try:
        validate_payloads(live.payloads, "backend.live.payloads")
    except PayloadConfigError as exc:
        raise ConfigError(exc.key, str(exc)[len(exc.key) + 2:]) from None
    for o, ms in live.work_ms.items():
        if o not in cfg.topology.operators:
            raise ConfigError(f"backend.live.work_ms.{o}", "unknown operator")
        if ms < 0:
            raise ConfigError(f"backend.live.work_ms.{o}", "must be >= 0")
    if not cfg.job.enabled:
        _validate_live_emission(cfg.topology)


def _validate_job(cfg: Any) -> None:
    """Job mode on the live backend (testbed/live/job.py): keyed workers on RabbitMQ only."""
    problem = cfg.backend.live.job.validate(cfg.job.max_scaleout)
    if problem is not None:
        raise ConfigError(*problem)
    if cfg.backend.live.transport != TransportName.rabbitmq:
        raise ConfigError("backend.live.transport", "job mode routes keys with RabbitMQ's consistent-hash exchange: "
                                                    "use rabbitmq")


def _validate_network(cfg: Any) -> None:
    """The emulated network live: per-instance queues and delayed publishes (testbed/live/netem.py),
    on RabbitMQ, availability per item."""
    if not cfg.backend.emulation.enabled:
        return
    if cfg.backend.live.transport != TransportName.rabbitmq:
        raise ConfigError("backend.emulation.enabled", "the live emulated network needs "
                                                       "backend.live.transport=rabbitmq (per-instance queues)")
    if cfg.backend.emulation.mode != AvailabilityMode.tuple:
        raise ConfigError("backend.emulation.mode", "the live backend emulates availability per item only "
                                                    "(tuple); outage runs in the simulator")


def _validate_live_emission(topo: TopologyConfig) -> None:
    """Live, `incident` needs an implementation with an incident rule; `ratio` on such an operator
    publishes one item per ratio_in-th input to every downstream operator, as the simulator does
    only if ratio_out is the number of downstream operators (O2, O6: 1:1 per edge)."""
    from operators.oee.emission import INCIDENT_OPERATORS

    for o, op in topo.operators.items():
        key = f"topology.operators.{o}.emission.live"
        if o not in INCIDENT_OPERATORS:
            if op.emission.live == EmissionMode.incident:
                raise ConfigError(key, f"incident: the live implementation of {o} has no incident rule (those of "
                                       f"{', '.join(sorted(INCIDENT_OPERATORS))} have); use ratio")
        elif op.emission.live == EmissionMode.ratio and op.ratio_out != len(op.downstream):
            raise ConfigError(f"topology.operators.{o}.ratio_out",
                              f"live ratio emission publishes one item per {op.ratio_in} inputs to each of the "
                              f"{len(op.downstream)} downstream operator(s): ratio_out must be {len(op.downstream)}, "
                              f"got {op.ratio_out}")
