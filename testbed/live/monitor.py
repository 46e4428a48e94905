"""The live monitor: every monitoring interval it reads queue depths (RabbitMQ management API, or
consumer lag on Kafka) and the metrics the instances wrote to Redis since the previous read, and it
builds the same `Snapshot` and the same event-log rows as the simulator (testbed/monitoring.py).

Instance and host states are not read here: the control loop passes the host pool's views
(`host_views(t)`, `instance_views()`), which already reflect Docker, so one monitoring step costs
one HTTP request (depths) and one XREAD loop (metrics).

Call pattern of the control loop (monitoring every 15 s, reasoning every 60 s, as in the simulator
where a reasoning cycle follows the monitoring read of the same instant):

    reading = monitor.observe(t, provider.emitted())    # each monitoring interval
    record_reading(tables, reading, topology.operators, pool.host_views(t), pool.instance_views())
    snap = monitor.snapshot(t, pool.host_views(t), pool.instance_views(), executor.scalings)

`snapshot` uses the depths of the latest `observe`; pass `depths=monitor.read_depths().depths` to
decide on fresher ones between monitoring reads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple

from operators.wiring import Wiring
from testbed.config import ExperimentConfig
from testbed.live.job_routing import Outage, redis_loss
from testbed.live.metrics_reader import InstanceActivity, MetricsReader, Sample, edge_counts, utilisation
from testbed.live.rabbit_management import ManagementClient, PassiveDepthReader, RunDepths
from testbed.live_config import LiveConfig, TransportName
from testbed.messages import one_line
from testbed.model import HostView, InstanceView, Snapshot
from testbed.monitoring import (
    Observer,
    SnapshotSettings,
    Tables,
    append_observation,
    append_samples,
    hosts_row,
    instance_counts,
    interval_means,
)
from testbed.observation import InstanceObservation, Observation, OperatorObservation
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


# table instance_cpu
CPU_COLUMNS = ("t_s", "operator", "instance", "busy_ms", "cpu_ms", "run_delay_ms", "container_cpu_ms")


def new_cpu_table() -> Dict[str, list]:
    return {c: [] for c in CPU_COLUMNS}


@dataclass(frozen=True)
class InstanceCpu:
    """One instance's busy wall time, CPU time and run-queue delay of an interval (a row of `instance_cpu`)."""

    instance: str
    operator: str
    busy_ms: int
    cpu_ms: Optional[int]  # None: the instance did not report it
    container_cpu_ms: Optional[int]
    run_delay_ms: Optional[int] = None  # the worker slots' wait for a CPU in busy periods


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
    observation: Observation  # the interval as both backends describe it (event-log rows, snapshot)
    cpu: Tuple[InstanceCpu, ...] = ()  # per observed instance: busy wall and CPU time (live only)
    container_cpu_ms: Optional[int] = None  # all the run's containers, unobserved ones too (None: none reported)

    @property
    def elapsed_s(self) -> float:
        return self.depths_s + self.metrics_s


class LiveMonitor:
    def __init__(self, topology: Topology, wiring: Wiring, depth_source: DepthSource, metrics: MetricsReader,
                 settings: SnapshotSettings, history: int, monitoring_s: float = 15.0, parallel: int = 1,
                 clock: Callable[[], float] = time.perf_counter):
        if set(wiring.operators) != set(topology.operators):
            raise ValueError(f"wiring operators {sorted(wiring.operators)} differ from the topology's "
                             f"{sorted(topology.operators)}")
        self.topology = topology
        self.operators: Tuple[str, ...] = topology.operators
        self.wiring = wiring
        self.depth_source = depth_source
        self.metrics = metrics
        self.settings = settings
        self.observer = Observer(topology, settings, history, monitoring_s)
        self.parallel = parallel  # items in process at once per instance (utilisation's denominator)
        self.clock = clock  # only times the reading itself
        self.last: Optional[MonitorReading] = None
        self._source_items: Dict[str, int] = {}  # cumulative per source at the last observe
        self.slowest_ms: Dict[str, float] = {}  # per operator: the longest sampled service time so far

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
                   SnapshotSettings.from_config(cfg, btu_s), cfg.runtime.history, cfg.runtime.monitoring_s,
                   live.parallel)

    def read_depths(self) -> RunDepths:
        return self.depth_source.run_depths(self.wiring)

    def observe(self, t: float, source_items: Optional[Mapping[str, int]] = None,
                purged: Optional[Mapping[str, int]] = None, inactive: Collection[str] = ()) -> MonitorReading:
        """Close the monitoring interval ending at t: depths now, metrics since the last call.
        ``source_items``: items emitted per source so far (the provider's cumulative counts), for the
        sources' edges and the input rate; ``purged``: items restarts purged in the interval, per
        operator; ``inactive``: pool members switched off at t, left out of the interval's instance
        observations unless they processed something in it (as in the simulator, where only serving
        instances are observed): they still write empty counts, and an operator's utilisation, the
        mean over its observed instances, would otherwise be diluted by its idle pool. The interval's
        observation feeds the snapshots."""
        began = self.clock()
        depths = self.read_depths()
        between = self.clock()
        batch = self.metrics.read()
        ops = self.operators
        means = interval_means(ops, (s.operator for s in batch.samples), (s.duration_ms for s in batch.samples))
        for s in batch.samples:
            if s.duration_ms > self.slowest_ms.get(s.operator, 0.0):
                self.slowest_ms[s.operator] = s.duration_ms
        totals = dict(source_items or {})
        previous, self._source_items = self._source_items, totals
        sent = {s: n - previous.get(s, 0) for s, n in totals.items()}
        interval = t - (self.last.t if self.last else 0.0)
        processed = {o: batch.processed.get(o, 0) for o in ops}
        dead = {o: batch.dead.get(o, 0) for o in ops}
        observed = self._observed(batch.instances, inactive)
        observation = self._observation(t, interval, sent, batch, depths.depths, processed, dead, means,
                                        purged or {}, observed)
        reading = MonitorReading(
            t=t, depths=dict(depths.depths), dead_letters=dict(depths.dead_letters), missing_queues=depths.missing,
            samples=batch.samples, processed=processed, dead=dead, means=means, malformed=batch.malformed,
            depths_s=between - began, metrics_s=self.clock() - between, observation=observation,
            cpu=tuple(InstanceCpu(i, a.operator, a.busy_ms, a.cpu_ms, a.container_cpu_ms, a.run_delay_ms)
                      for i, a in observed),
            container_cpu_ms=_sum_known(a.container_cpu_ms for a in batch.instances.values()),
        )
        self.observer.observe(observation)
        self.last = reading
        return reading

    def _observed(self, activity: Mapping[str, InstanceActivity],
                  inactive: Collection[str]) -> List[Tuple[str, InstanceActivity]]:
        """The instances an interval observes, in operator order: those of the topology, a switched-off
        pool member only if it processed something."""
        return [(i, a) for i, a in sorted(activity.items(), key=lambda kv: (self._rank(kv[1].operator), kv[0]))
                if a.operator in self.operators and (i not in inactive or a.processed > 0)]

    def _rank(self, operator: str) -> int:
        return self.operators.index(operator) if operator in self.operators else len(self.operators)

    def _observation(self, t: float, interval: float, sent: Mapping[str, int], batch: Any, depths: Mapping[str, int],
                     processed: Mapping[str, int], dead: Mapping[str, int],
                     means: Mapping[str, Optional[float]], purged: Mapping[str, int],
                     observed: Sequence[Tuple[str, InstanceActivity]] = ()) -> Observation:
        """Per edge: a source's items are the provider's; an operator publishes each emission once to a
        fanout that feeds every downstream queue, so each of its edges carries its emitted count."""
        edges = {(s.name, d): sent.get(s.name, 0) for s in self.topology.sources for d in s.downstream}
        edges.update(edge_counts(batch.emitted, self.topology.downstream))
        received = {o: 0 for o in self.operators}
        for (_, target), items in edges.items():
            received[target] += items
        operators = {
            o: OperatorObservation(received=received[o], processed=processed[o], queue=depths.get(o, 0),
                                   dropped={"dead_letter": dead[o], "purge": purged.get(o, 0),
                                            "timeout": batch.timed_out.get(o, 0)}, duration_ms=means[o])
            for o in self.operators}
        instances = tuple(
            InstanceObservation(i, a.operator, a.processed,
                                min(1.0, utilisation(a.busy_ms, interval, self.parallel) or 0.0))
            for i, a in observed)
        return Observation(t=t, interval_s=interval if interval > 0 else self.observer.monitoring_s,
                           input_items=sum(sent.values()), operators=operators, edges=edges, instances=instances)

    def snapshot(self, t: float, hosts: Tuple[HostView, ...], instances: Tuple[InstanceView, ...],
                 scalings: Mapping[str, int], depths: Optional[Mapping[str, int]] = None) -> Snapshot:
        """What the policy sees at t: the latest observation, with ``depths`` of that moment if given."""
        if depths is None and self.last is None:
            raise RuntimeError("snapshot before the first observe(): no depths yet (pass depths=)")
        return self.observer.snapshot(t, hosts, instances, scalings, depths)

    def read_remaining_samples(self) -> Tuple[Sample, ...]:
        """The duration samples written since the last reading, read to the end of the stream: what
        the instances finished while draining after the run's last interval (their counts are in the
        final accounting; their samples, and the end-to-end latencies among them, belong in the log)."""
        samples: List[Sample] = []
        while True:
            batch = self.metrics.read()
            samples.extend(batch.samples)
            if batch.entries < self.metrics.max_entries:
                return tuple(samples)

    def slowest_s(self, operator: str) -> float:
        return self.slowest_ms.get(operator, 0.0) / 1000.0

    def totals(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        """Cumulative (processed, dead) per operator, from the Redis hashes (final accounting)."""
        processed, dead = self.metrics.totals()
        return ({o: processed.get(o, 0) for o in self.operators}, {o: dead.get(o, 0) for o in self.operators})

    def close(self) -> None:
        close = getattr(self.depth_source, "close", None)
        if close is not None:
            close()


def record_reading(tables: Tables, reading: MonitorReading, operators: Sequence[str],
                   hosts: Sequence[HostView], instances: Sequence[InstanceView], sinks: Sequence[str] = ()) -> None:
    """Append a reading and the pool's views to the event-log tables, in the simulator's columns:
    `processed`, `queues`, `instances`, `hosts` (one interval) and `samples` (the new samples).
    ``tables`` comes from ``testbed.monitoring.new_monitor_tables(samples=True)``.

    `instances` counts the views in state running; a migration source the pool already shows as
    draining is not counted, where the simulator counts it until its copy runs (a difference of
    at most one instance per migration in progress)."""
    leased, ready = hosts_row(hosts)
    append_observation(tables, reading.observation, instance_counts(operators, instances), leased, ready)
    record_cpu(tables, reading)
    record_samples(tables, reading.samples, sinks)


def _sum_known(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def record_cpu(tables: Tables, reading: MonitorReading) -> None:
    """Append the reading's busy and CPU times and run-queue delays to `instance_cpu`, where the tables
    have one (live runs)."""
    table = tables.get("instance_cpu")
    if table is None:
        return
    for row in reading.cpu:
        for column, value in zip(CPU_COLUMNS, (reading.t, row.operator, row.instance, row.busy_ms, row.cpu_ms,
                                               row.run_delay_ms, row.container_cpu_ms), strict=True):
            table[column].append(value)


def record_samples(tables: Tables, samples: Sequence[Sample], sinks: Sequence[str] = ()) -> None:
    """Append duration samples to `samples`, and the end-to-end latency of those that finished at a
    sink to `latency` (where the tables have one)."""
    append_samples(tables, [x.t_s for x in samples], [x.operator for x in samples], [x.instance for x in samples],
                   [x.duration_ms for x in samples])
    if "latency" in tables:
        latency = tables["latency"]
        for x in samples:
            if x.operator in sinks and x.latency_ms is not None:
                latency["t_s"].append(x.t_s)
                latency["operator"].append(x.operator)
                latency["latency_ms"].append(x.latency_ms)


# what an operator-mode run keeps in Redis (the reason of a lost state names it)
OPERATOR_STATE = "operator state, counts, finished item ids and network view"


def redis_client(url: str) -> Any:
    """A client whose commands fail within seconds while Redis is away (a watch must not hang)."""
    import redis as redis_lib
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return redis_lib.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=3,
                                    retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3))


class RedisStateWatch:
    """Whether the run's state in Redis still holds. The runners keep there what the accounting and
    the deduplication rest on (finished ids, cumulative counts, operator state, the network view); a
    Redis that restarted (another ``run_id``: the testbed's Redis keeps nothing on disk) or lost the
    run's marker key has lost them, and a run going on would end with wrong totals. A Redis away for
    a while is survivable (the runners keep their counts for later and process rather than stall),
    for longer than ``outage_s`` it is not: duplicates go unrecognised all that time."""

    def __init__(self, client: Any, prefix: str, outage_s: float):
        self.client = client
        self.key = f"{prefix}:run"
        self.outage = Outage(outage_s)
        self.run_id: Optional[str] = None

    def start(self) -> None:
        """Mark the run's state (call once, before anything writes it) and note the server's run_id."""
        self.client.set(self.key, "1")
        self.run_id = self._server_id()

    def check(self, t: float) -> Optional[str]:
        """The reason the run cannot go on at t, None while it can."""
        if self.run_id is None:
            return None
        from redis.exceptions import RedisError

        try:
            now_id, present = self._server_id(), bool(self.client.exists(self.key))
        except (RedisError, OSError) as exc:
            if self.outage.failed(t):
                return (f"Redis unreachable since t={self.outage.since:.0f} s, more than {self.outage.limit_s:.0f} s "
                        f"({one_line(str(exc), 120)}): the run's {OPERATOR_STATE} are there; the run cannot go on")
            return None
        self.outage.ok()
        return redis_loss(t, self.run_id, now_id, present, OPERATOR_STATE)

    def confirm(self, t: float, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> Optional[str]:
        """As `check`, for a verdict that cannot wait for the next check (the run's end, a failed
        read): a Redis that does not answer is asked again until it does or has been away for the
        outage limit, so that a restart under way is told from an outage, never taken for a state
        that holds."""
        if self.run_id is None:
            return None
        end = clock() + self.outage.limit_s
        while True:
            reason = self.check(t)
            if reason is not None or self.outage.since is None:
                return reason
            if clock() >= end:
                return self.check(max(t, self.outage.since + self.outage.limit_s + 1.0))
            sleep(0.5)

    def _server_id(self) -> str:
        return str(self.client.info("server").get("run_id", ""))
