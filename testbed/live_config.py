"""The typed settings of the live testbed (`backend=docker`, `backend.live.*`; testbed/backends/docker.py
registers them): its Docker engines, broker, Redis, images and what its operators and provider do.
Typed here without heavy imports, so that the configuration and the live runtime can both include them."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List

from testbed.backend_registry import BackendSettings
from testbed.job_config import LiveJobConfig
from testbed.workloads.payloads import PayloadConfig


class TransportName(str, Enum):
    rabbitmq = "rabbitmq"
    kafka = "kafka"


@dataclass
class EngineConfig:
    """One Docker engine of the live host pool; it carries up to ``max_hosts`` logical hosts."""

    url: str = "unix:///var/run/docker.sock"  # or tcp://host:2375, ssh://user@host
    max_hosts: int = 10


@dataclass
class LiveConfig(BackendSettings):
    """The live testbed (backend=docker). Host capacity, lease delay, container start and pull
    bandwidth come from `infrastructure`, prices from `billing`."""

    engines: List[EngineConfig] = field(default_factory=lambda: [EngineConfig()])
    transport: TransportName = TransportName.rabbitmq
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    management_url: str = "http://127.0.0.1:15672"  # RabbitMQ management API (credentials from amqp_url)
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_partitions: int = 8  # per topic: the most instances of one operator type that share work on Kafka
    redis_url: str = "redis://127.0.0.1:6379/0"
    image_prefix: str = "testbed-"  # operator images are <prefix><operator, lower case>:<image_tag>
    image_tag: str = "latest"
    network_mode: str = "host"  # containers reach the broker and Redis at the addresses above
    prefetch: int = 5
    parallel: int = 1  # items in process at once per instance
    # a stopping instance's allowance for confirms, metrics flush and exit; its drain deadline adds
    # 3 x parallel x the slowest service time seen in the run (testbed/live/hostpool.py)
    stop_timeout_s: float = 15.0
    emulate_pull: bool = True  # hosts sharing one engine: wait image_mb / pull_mb_per_s on first use
    cgroup_parent: bool = False  # enforce each logical host's CPU and memory with a cgroup parent
    work_ms: Dict[str, float] = field(default_factory=dict)  # optional emulated work per operator
    keep_broker_state: bool = False  # keep the run's queues and Redis keys after it (debugging)
    report_operator: str = "O9"  # its PDF reports go to <run folder>/reports (engines on this machine)
    job: LiveJobConfig = field(default_factory=LiveJobConfig)  # job mode's keyed workers (testbed/live/job.py)
    # what the provider's readings hold (defect and temperature incidents, production): live O2/O6
    # warn once per new incident, so these rates decide how many items reach the sink
    payloads: PayloadConfig = field(default_factory=PayloadConfig)
