"""The live monitor: every monitoring interval it reads queue depths (RabbitMQ management API, or
consumer lag on Kafka) and the metrics the instances wrote to Redis since the previous read, and it
builds the same `Snapshot` and the same event-log rows as the simulator (testbed/monitoring.py).

Instance and host states are not read here: the control loop passes the host pool's views
(`host_views(t)`, `instance_views()`), which already reflect Docker, so one monitoring step costs
one HTTP request (depths) and one XREAD loop (metrics).

Call pattern of the control loop (monitoring every 15 s, reasoning every 60 s, as in the simulator
where a reasoning cycle follows the monitoring read of the same instant):

    reading = monitor.observe(t)                        # each monitoring interval
    record_reading(tables, reading, topology.operators, pool.host_views(t), pool.instance_views())
    snap = monitor.snapshot(t, pool.host_views(t), pool.instance_views(), executor.scalings, input_rate)

`snapshot` uses the depths of the latest `observe`; pass `depths=monitor.read_depths().depths` to
decide on fresher ones between monitoring reads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Protocol, Sequence, Tuple

from operators.wiring import Wiring
from testbed.config import ExperimentConfig, LiveConfig, TransportName
from testbed.live.metrics_reader import MetricsReader, Sample
from testbed.live.rabbit_management import ManagementClient, PassiveDepthReader, RunDepths
from testbed.model import HostView, InstanceView, Snapshot
from testbed.monitoring import (
    DurationWindows, SnapshotSettings, Tables, append_monitor_rows, append_samples, build_snapshot, counted,
    hosts_row, instance_counts, interval_means,
)
from testbed.topology import Topology


class DepthSource(Protocol):
    """Queue depths of a run per operator (ManagementClient, PassiveDepthReader, KafkaLagReader)."""

    def run_depths(self, wiring: Wiring) -> RunDepths: ...


def depth_source(live: LiveConfig, exact: bool = False) -> DepthSource:
    """Consumer lag on Kafka; on RabbitMQ the management API, or passive declares when ``exact``
    (ready messages only: exact once no consumer holds any, as after a run's drain)."""
    if live.transport == TransportName.kafka:
        from testbed.live.kafka_lag import KafkaLagReader

        return KafkaLagReader(live.kafka_bootstrap)
    if exact:
        return PassiveDepthReader(live.amqp_url)
    return ManagementClient(live.management_url, live.amqp_url)


@dataclass(frozen=True)
class MonitorReading:
    """One monitoring interval ending at t (seconds since the run's start)."""

    t: float
    depths: Dict[str, int]  # per operator: items waiting (ready + unacked, or consumer lag)
    dead_letters: Dict[str, int]  # per operator: messages in its dead-letter queues (RabbitMQ)
    missing_queues: Tuple[str, ...]  # queues/topics of the run the broker did not list
    samples: Tuple[Sample, ...]  # duration samples written since the previous reading
    processed: Dict[str, int]  # per operator: items processed since the previous reading
    dead: Dict[str, int]  # per operator: items dead-lettered since the previous reading
    means: Dict[str, Optional[float]]  # per operator: mean sampled duration of the interval (ms)
    malformed: int  # metric entries skipped as malformed in this interval
    depths_s: float  # what reading the depths cost (wall time)
    metrics_s: float  # what reading the metrics cost (wall time)

    @property
    def elapsed_s(self) -> float:
        return self.depths_s + self.metrics_s


class LiveMonitor:
    def __init__(self, topology: Topology, wiring: Wiring, depth_source: DepthSource, metrics: MetricsReader,
                 settings: SnapshotSettings, samples: int, clock: Callable[[], float] = time.perf_counter):
        if set(wiring.operators) != set(topology.operators):
            raise ValueError(f"wiring operators {sorted(wiring.operators)} differ from the topology's "
                             f"{sorted(topology.operators)}")
        self.topology = topology
        self.operators: Tuple[str, ...] = topology.operators
        self.wiring = wiring
        self.depth_source = depth_source
        self.metrics = metrics
        self.settings = settings
        self.durations = DurationWindows(self.operators, samples)
        self.clock = clock  # only times the reading itself
        self.last: Optional[MonitorReading] = None

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, topology: Topology, wiring: Wiring, run_start_s: float,
                    btu_s: float, redis: Any = None, exact_depths: bool = False) -> "LiveMonitor":
        """The monitor of a live run: depths from the management API (RabbitMQ) or consumer lag
        (Kafka), metrics from ``cfg.backend.live.redis_url`` unless a Redis client is given.
        ``exact_depths``: RabbitMQ depths by passive declares instead (exact, ready only; see
        testbed/live/rabbit_management.py for why the management API is the default)."""
        live = cfg.backend.live
        source = depth_source(live, exact_depths)
        if redis is None:
            import redis as redis_lib

            redis = redis_lib.Redis.from_url(live.redis_url)
        return cls(topology, wiring, source, MetricsReader(redis, wiring.prefix, run_start_s),
                   SnapshotSettings.from_config(cfg, btu_s), cfg.runtime.history)

    def read_depths(self) -> RunDepths:
        return self.depth_source.run_depths(self.wiring)

    def observe(self, t: float) -> MonitorReading:
        """Close the monitoring interval ending at t: depths now, metrics since the last call; the
        interval's mean durations join the windows the snapshot shows."""
        began = self.clock()
        depths = self.read_depths()
        between = self.clock()
        batch = self.metrics.read()
        ops = self.operators
        means = interval_means(ops, (s.operator for s in batch.samples), (s.duration_ms for s in batch.samples))
        self.durations.push(means)
        reading = MonitorReading(
            t=t, depths=dict(depths.depths), dead_letters=dict(depths.dead_letters), missing_queues=depths.missing,
            samples=batch.samples, processed={o: batch.processed.get(o, 0) for o in ops},
            dead={o: batch.dead.get(o, 0) for o in ops}, means=means, malformed=batch.malformed,
            depths_s=between - began, metrics_s=self.clock() - between,
        )
        self.last = reading
        return reading

    def snapshot(self, t: float, hosts: Tuple[HostView, ...], instances: Tuple[InstanceView, ...],
                 scalings: Mapping[str, int], input_rate: float,
                 depths: Optional[Mapping[str, int]] = None) -> Snapshot:
        """What the policy sees at t. ``input_rate``: items per second emitted into the topology
        over the last monitoring interval (the provider counts emissions)."""
        if depths is None:
            if self.last is None:
                raise RuntimeError("snapshot before the first observe(): no depths yet (pass depths=)")
            depths = self.last.depths
        return build_snapshot(t, self.topology.types, self.operators, counted(self.operators, instances), depths,
                              self.durations, scalings, hosts, instances, input_rate, self.settings)

    def totals(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        """Cumulative (processed, dead) per operator, from the Redis hashes (final accounting)."""
        processed, dead = self.metrics.totals()
        return ({o: processed.get(o, 0) for o in self.operators}, {o: dead.get(o, 0) for o in self.operators})

    def close(self) -> None:
        close = getattr(self.depth_source, "close", None)
        if close is not None:
            close()


def record_reading(tables: Tables, reading: MonitorReading, operators: Sequence[str],
                   hosts: Sequence[HostView], instances: Sequence[InstanceView]) -> None:
    """Append a reading and the pool's views to the event-log tables, in the simulator's columns:
    `processed`, `queues`, `instances`, `hosts` (one interval) and `samples` (the new samples).
    ``tables`` comes from ``testbed.monitoring.new_monitor_tables(samples=True)``.

    `instances` counts the views in state running; a migration source the pool already shows as
    draining is not counted, where the simulator counts it until its copy runs (a difference of
    at most one instance per migration in progress)."""
    leased, ready = hosts_row(hosts)
    append_monitor_rows(tables, reading.t, operators, reading.processed, reading.depths,
                        instance_counts(operators, instances), leased, ready)
    s = reading.samples
    append_samples(tables, [x.t_s for x in s], [x.operator for x in s], [x.instance for x in s],
                   [x.duration_ms for x in s])
