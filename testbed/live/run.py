"""One run on the live testbed: the operator topology as containers on leased Docker hosts, the data
provider publishing to RabbitMQ (or Kafka), the same policy object as in the simulator asked for
actions every reasoning cycle, and the same event-log tables as a result.

Phases: check the engines and images (nothing is leased if one is missing) → declare the broker
wiring and clear the run's Redis keys → initial deployment, waited for → provider + control loop
for the run's duration → provider stopped and flushed, every instance drained (SIGTERM) → final
accounting of every emitted item → tables. Whatever ends the run (Ctrl-C included), `finally`
removes every container of the run; the caller marks the manifest incomplete on an exception.

Redis holds what the accounting rests on (the runners' finished ids and counts); a Redis that
restarted, lost the run's keys or stayed away for `REDIS_OUTAGE_S` ends the run with one line
naming it and the time (`RedisStateWatch`, checked every `POLL_S`), never with wrong totals.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from kafka.errors import KafkaError
from redis.exceptions import RedisError

from operators.oee.emission import INCIDENT_OPERATORS
from operators.transports import create_topics, declare_wiring
from operators.wiring import Wiring, kafka_topics, wiring_for
from testbed.actions import actions_table
from testbed.config import ExperimentConfig
from testbed.live.executor import LiveExecutor
from testbed.live.machine_load import MachineLoad
from testbed.live.monitor import (
    LiveMonitor,
    RedisStateWatch,
    depth_source,
    new_cpu_table,
    record_reading,
    record_samples,
    redis_client,
)
from testbed.live.netem import LiveNetwork, new_traffic_table
from testbed.live.provider_thread import ProviderThread
from testbed.live.rabbit_management import ManagementError, RunDepths
from testbed.live.switchboard import RedisSwitchboard
from testbed.live_config import LiveConfig, TransportName
from testbed.messages import one_line
from testbed.model import InstanceState
from testbed.monitoring import Observer, SnapshotSettings, new_monitor_tables
from testbed.placement.records import placements_table
from testbed.policies.base import Policy, initial_deployment
from testbed.rng import stream
from testbed.run_result import RunResult, verdict
from testbed.topology import Topology
from testbed.workloads.patterns import Pattern

log = logging.getLogger(__name__)

REPORTS_MOUNT = "/reports"  # where the report operator writes inside its container

# what a monitoring read may raise while a service restarts; the run goes on without that reading
MONITOR_ERRORS = (ManagementError, RedisError, KafkaError, OSError)


class LiveRunError(RuntimeError):
    """The live run cannot go on (engine, broker, provider or instances failed); says which."""


@dataclass
class Accounting:
    """Where every emitted item ended: per operator, inputs = processed + still queued + dead-lettered
    + purged by restarts + dropped by the item timeout (topology.item_timeout_s)."""

    emitted: Dict[str, int]  # per source
    inflow: Dict[str, int]  # per operator: items published into its input queues
    processed: Dict[str, int]
    queued: Dict[str, int]
    dead: Dict[str, int]
    purged: Dict[str, int] = field(default_factory=dict)
    # still queued although finished: processed and remembered, but the ack was lost (a broker
    # restart); the runner would acknowledge them unprocessed, so they count once, as processed
    finished_queued: Dict[str, int] = field(default_factory=dict)
    timed_out: Dict[str, int] = field(default_factory=dict)  # dropped unprocessed: older than the item timeout
    unavailable: Dict[str, int] = field(default_factory=dict)  # lost to the emulated network (testbed/live/netem.py)
    # inflow - processed - (queued - finished_queued) - dead - purged - timed_out - unavailable, if not 0
    missing: Dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: dict(v) for k, v in self.__dict__.items()}

    def lost(self) -> Dict[str, int]:
        """Per operator, items that went nowhere: these make a run incomplete."""
        return {o: m for o, m in self.missing.items() if m > 0}

    def excess(self) -> Dict[str, int]:
        """Per operator, items counted more than once. Delivery is at least once across faults (a copy
        republished after a broker restart, an input processed again after a crash); the runners' finished
        ids count nearly all of them once, and what is left is recorded, not a loss."""
        return {o: -m for o, m in self.missing.items() if m < 0}


def exact_depths(cfg: ExperimentConfig, wiring: Wiring) -> RunDepths:
    """Depths read from the broker itself (after the drain: nothing is unacknowledged any more)."""
    reader = depth_source(cfg.backend.live, exact=True)
    try:
        return reader.run_depths(wiring)
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()


def finished_in_queues(live: LiveConfig, wiring: Wiring, depths: Mapping[str, int]) -> Dict[str, int]:
    """Per operator, the items left in its RabbitMQ queues whose finish its runner already recorded
    in Redis (operators/api.py `seen_key`): read without acknowledging, then handed back when the
    channel closes. After the drain nothing else consumes. Kafka's lag says nothing per item: {}."""
    if live.transport != TransportName.rabbitmq or not any(depths.values()):
        return {}
    import pika
    import redis

    from operators.api import seen_key
    from operators.envelope import Envelope, EnvelopeError

    found: Dict[str, int] = {}
    client = redis.Redis.from_url(live.redis_url)
    conn = pika.BlockingConnection(pika.URLParameters(live.amqp_url))
    try:
        for e in wiring.edges:
            if not depths.get(e.consumer):
                continue
            channel = conn.channel()
            keys = []
            while True:
                method, _props, body = channel.basic_get(e.queue, auto_ack=False)
                if method is None:
                    break
                try:
                    keys.append(seen_key(wiring.prefix, e.consumer, e.producer, Envelope.decode(body).item_id))
                except EnvelopeError:
                    continue  # malformed: dead-lettered when consumed, not a finished item
            if keys:
                pipe = client.pipeline(transaction=False)
                for k in keys:
                    pipe.exists(k)
                found[e.consumer] = found.get(e.consumer, 0) + sum(bool(x) for x in pipe.execute())
            channel.close()  # the unacknowledged reads go back to the queue
    finally:
        if conn.is_open:
            conn.close()
        client.close()
    return {o: n for o, n in found.items() if n}


def delete_wiring(amqp_url: str, wiring: Wiring) -> None:
    import pika

    from operators import wiring as wiring_mod

    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        wiring_mod.delete(conn.channel(), wiring)
    finally:
        if conn.is_open:
            conn.close()


def run_prefix(run_id: str) -> str:
    """A broker/Redis prefix for a run id such as 'stepwise/btu-10/1' (names allow [A-Za-z0-9_-])."""
    return "".join(c if c.isalnum() or c in "_-" else "-" for c in run_id)[:80]


def operator_environment(cfg: ExperimentConfig, wiring: Wiring, operator: str, sample_every: int) -> Dict[str, str]:
    """The environment an operator container starts with (operators/runner_config.py reads it)."""
    live = cfg.backend.live
    topology = {
        "sources": {s: list(src.downstream) for s, src in cfg.topology.sources.items()},
        "operators": {o: list(op.downstream) for o, op in cfg.topology.operators.items()},
    }
    env = {
        "OPERATOR": operator,
        "RUN_PREFIX": wiring.prefix,
        "TRANSPORT": live.transport.value,
        "AMQP_URL": live.amqp_url,
        "KAFKA_BOOTSTRAP": live.kafka_bootstrap,
        "REDIS_URL": live.redis_url,
        "PREFETCH": str(live.prefetch),
        "PARALLEL": str(live.parallel),
        "SAMPLE_EVERY": str(sample_every),
        "SAMPLING": cfg.runtime.sampling.value,
        "MEASUREMENT": cfg.runtime.measurement.value,
        "TOPOLOGY": json.dumps(topology, separators=(",", ":")),
    }
    params = emission_params(cfg, operator)
    if params:
        env["OPERATOR_PARAMS"] = json.dumps(params, separators=(",", ":"))
    if operator in live.work_ms:
        env["WORK_MS"] = str(live.work_ms[operator])
    if cfg.topology.item_timeout_s > 0:
        env["ITEM_TIMEOUT_S"] = str(cfg.topology.item_timeout_s)
    return env


def emission_params(cfg: ExperimentConfig, operator: str) -> Dict[str, Any]:
    """The params that set what an operator with an incident rule (O2, O6) passes on:
    `topology.operators.<op>.emission.live`, and in ratio mode every ratio_in-th input (config
    validation has checked that ratio_out equals its downstream operators). Empty for the others."""
    if operator not in INCIDENT_OPERATORS:
        return {}
    op = cfg.topology.operators[operator]
    return {"emission": op.emission.live.value, "every_n": int(op.ratio_in)}


class LiveRun:
    """One live run; `run()` returns the same result type as the simulator."""

    POLL_S = 1.0  # the watchdog, migrations and releases are looked after this often
    PROGRESS_S = 60.0  # a progress line (elapsed time, instances, hosts) this often
    DEPLOY_TIMEOUT_S = 300.0
    REDIS_OUTAGE_S = 30.0  # Redis away longer than this ends the run (RedisStateWatch)

    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Pattern, seed: int, btu_minutes: int,
                 run_id: str, run_dir: Optional[Path] = None, wall: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.cfg = cfg
        self.policy = policy
        self.pattern = pattern
        self.seed = seed
        self.btu_s = btu_minutes * 60.0
        self.run_id = run_id
        self.prefix = f"{run_prefix(run_id)}-{uuid.uuid4().hex[:8]}".lower()  # fresh broker and Redis names
        self.topology = Topology.from_config(cfg.topology)
        self.wiring = wiring_for(cfg.topology, self.prefix)
        self.duration_s = cfg.duration_min * 60.0
        self.run_dir = run_dir
        self.wall = wall
        self.sleep = sleep
        self._t0: Optional[float] = None  # wall time of the run's start: the provider's first tick
        self.monitor_failures: List[str] = []
        self.network: Optional[LiveNetwork] = None  # the emulated network (backend.emulation.enabled)
        self.redis_watch: Optional[RedisStateWatch] = None
        self.machine_load = MachineLoad()  # the CPU other processes took beside the run

    def now(self) -> float:
        """Seconds since the run started; 0 during the initial deployment (as in the simulator)."""
        return 0.0 if self._t0 is None else self.wall() - self._t0

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        from testbed.live.hostpool import HostPool

        pool = HostPool(self.cfg, self.prefix, self.now, stream(self.seed, "cloud"))
        pool.check_engines()  # an unreachable engine or a missing image fails here, before any lease
        self._provider: Optional[ProviderThread] = None
        self._monitor: Optional[LiveMonitor] = None
        try:
            executor = self._start(pool)
            provider = self._start_provider(executor)
            monitor, tables = self._start_monitor(pool)
            self._control_loop(pool, executor, monitor, provider, tables)
            return self._finish(pool, executor, monitor, provider, tables)
        except RedisError as exc:  # a read that failed: a lost state explains it best
            reason = self._redis_verdict() or f"Redis unreachable at t={self.now():.0f} s: {exc}"
            raise LiveRunError(one_line(reason)) from exc
        finally:
            self._teardown(pool)

    def _start(self, pool) -> LiveExecutor:
        """Broker names, the Redis watch, the emulated network and the initial deployment."""
        cfg, live = self.cfg, self.cfg.backend.live
        self._declare()
        self.redis_watch = RedisStateWatch(redis_client(live.redis_url), self.prefix, self.REDIS_OUTAGE_S)
        self.redis_watch.start()
        if cfg.backend.emulation.enabled:
            self.network = LiveNetwork(cfg.backend.emulation, self.wiring, live.amqp_url,
                                       redis_client(live.redis_url), self.seed)
        executor = self._executor(pool)
        self._deploy(pool, executor)
        if self.network is not None:
            self.network.sync(executor.views(0.0)[1])
        return executor

    def _start_provider(self, executor: LiveExecutor) -> ProviderThread:
        provider = ProviderThread(self.cfg, self.pattern, self.wiring, self.seed, self.duration_s,
                                  wrap=self.network.sender if self.network is not None else None)
        self._provider = provider
        # a restart acting on the source holds, drops or pauses the provider's items
        executor.source_gate = provider.gate
        provider.start()
        self._t0 = self.wall()
        return provider

    def _start_monitor(self, pool) -> Tuple[LiveMonitor, Dict[str, Dict[str, list]]]:
        monitor = LiveMonitor.from_config(self.cfg, self.topology, self.wiring, time.time(), self.btu_s)
        self._monitor = monitor
        pool.service_bound_s = monitor.slowest_s  # drain deadlines follow the service times seen
        tables = new_monitor_tables(samples=True)
        tables["instance_cpu"] = new_cpu_table()
        self.machine_load.start(self.now())
        if self.network is not None:
            monitor.depth_source = self.network.depths(monitor.depth_source)
            tables["host_traffic"] = new_traffic_table()
        return monitor, tables

    def _finish(self, pool, executor: LiveExecutor, monitor: LiveMonitor, provider: ProviderThread,
                tables: Dict[str, Dict[str, list]]) -> RunResult:
        """Stop the provider, record the last interval, drain, account and build the run's tables."""
        flushed = provider.stop()
        end = self.now()
        if self._guard(end, monitor.observe, end, provider.emitted(), executor.take_purged(),
                       self._inactive(executor, end)) is not None:
            self._record(monitor, tables, executor.views(end), end)
        accounting, undrained = self._drain_and_account(pool, monitor, provider, executor.purged_total)
        # what finished while draining: its samples and the senders' reports (a failed read ends the run,
        # the tables would lack them)
        record_samples(tables, monitor.read_remaining_samples(), self.topology.sinks)
        if self.network is not None:
            self.network.record(tables, end)
        # after the last read of Redis: a restart during the drain or the reads leaves totals that are not
        # the run's, and a Redis that does not answer now is waited for to tell
        reason = self._redis_verdict()
        if reason:
            raise LiveRunError(reason)
        tables["load"] = provider.load_table()
        tables["actions"] = actions_table(executor.records, self.policy.name)
        tables["placements"] = placements_table(executor.records, self.policy.placement)
        tables["leases"] = pool.leases(end)
        missing = {f"missing items of {o}": m for o, m in accounting.lost().items()}
        excess = accounting.excess()
        if excess:
            log.warning("%s: items counted more than once (at-least-once delivery across a fault): %s",
                        self.prefix, excess)
        return RunResult(tables, end, self._details(pool, executor, provider, flushed, accounting.as_dict()),
                         incomplete=verdict(undrained, missing))

    def _details(self, pool, executor: LiveExecutor, provider: ProviderThread, flushed: bool,
                 accounting: Dict[str, Any]) -> Dict[str, Any]:
        details: Dict[str, Any] = {
            "prefix": self.prefix, "provider_flushed": flushed, "transport": self.cfg.backend.live.transport.value,
            "provider_stats": provider.transport.stats.as_dict(), "accounting": accounting,
            "provider_held_ticks": provider.gated.held_ticks,  # held by restarts with source=hold
            "provider_dropped_items": provider.gated.dropped_items,  # dropped by restarts with source=drop
            "provider_paused_ticks": provider.gated.paused_ticks,  # skipped by restarts with source=pause
            "entry_kept": executor.entry_kept,  # per restart keeping them: items left in the entry queues
            "instances": [dataclasses.asdict(r) for r in pool.records()],
            "crashes": [dataclasses.asdict(c) for c in pool.crashed()],
            "images": pool.image_digests(), "monitor_failures": self.monitor_failures,
            "engines": pool.engine_details(),
            "machine_load": {**self.machine_load.summary(), "local_engines": self._local_engines()},
        }
        if self.network is not None:
            details["network"] = self.network.details()
        return details

    def _local_engines(self) -> bool:
        """Whether every engine runs on this machine: only then are the run's containers among its CPUs."""
        return all(e.url.startswith("unix://") for e in self.cfg.backend.live.engines)

    def _teardown(self, pool) -> None:
        """Whatever happened: the provider stopped, the run's containers removed, its broker names deleted."""
        if self._provider is not None and self._provider.running:
            self._provider.stop(flush_timeout_s=5.0)
        removed = pool.cleanup()
        if removed:
            log.info("removed %d container(s) of run %s", removed, self.prefix)
        if self._monitor is not None:
            self._monitor.close()
        if not self.cfg.backend.live.keep_broker_state:
            self._undeclare()

    def _executor(self, pool) -> LiveExecutor:
        """Instances get their operator's environment; the report operator also a folder of the run
        for its PDFs, where the engines are on this machine (a bind mount names a path there)."""
        live = self.cfg.backend.live
        reports = None
        if self.run_dir is not None and live.report_operator in self.topology.operators \
                and all(e.url.startswith("unix://") for e in live.engines):
            reports = self.run_dir / "reports"
            shutil.rmtree(reports, ignore_errors=True)
            reports.mkdir(parents=True)
            reports.chmod(0o777)  # operators run as an unprivileged user

        def env_for(operator: str) -> Dict[str, str]:
            env = operator_environment(self.cfg, self.wiring, operator, self.cfg.runtime.sample_every)
            if reports is not None and operator == live.report_operator:
                params = json.loads(env.get("OPERATOR_PARAMS", "{}"))
                env["OPERATOR_PARAMS"] = json.dumps({**params, "report_dir": REPORTS_MOUNT})
            return env

        def volumes_for(operator: str) -> Dict[str, Dict[str, str]]:
            if reports is None or operator != live.report_operator:
                return {}
            return {str(reports.resolve()): {"bind": REPORTS_MOUNT, "mode": "rw"}}

        import redis

        if self.network is not None:  # instances get their own queues, declared before they start
            pool = self.network.pool(pool)
        switchboard = RedisSwitchboard(redis.Redis.from_url(live.redis_url), self.wiring, live.amqp_url,
                                       kafka=live.transport == TransportName.kafka,
                                       queues=self.network.instance_wiring if self.network is not None else None)
        return LiveExecutor(pool, self.topology.types, env_for, volumes_for, switchboard)

    def _declare(self) -> None:
        live = self.cfg.backend.live
        if live.transport == TransportName.rabbitmq:
            declare_wiring(live.amqp_url, self.wiring)
        else:
            create_topics(live.kafka_bootstrap, kafka_topics(self.wiring)
                          + tuple(e.dead_letter_queue for e in self.wiring.edges), live.kafka_partitions)

    def _undeclare(self) -> None:
        live = self.cfg.backend.live
        try:
            if live.transport == TransportName.rabbitmq:
                delete_wiring(live.amqp_url, self.wiring)
            if self.network is not None:
                self.network.delete_queues()
            import redis

            client = redis.Redis.from_url(live.redis_url)
            keys = list(client.scan_iter(f"{self.prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
        except Exception as exc:  # cleanup must not hide the run's own outcome
            log.warning("could not remove the broker/Redis state of %s: %s", self.prefix, exc)

    def _deploy(self, pool, executor: LiveExecutor) -> None:
        """The initial deployment, placed as in the simulator and waited for until every instance runs."""
        rt = self.cfg.runtime
        for _ in range(10):  # a policy's own (static) step by step, until it returns nothing
            hosts, instances = executor.views(0.0)
            snap = Observer(self.topology, SnapshotSettings.from_config(self.cfg, self.btu_s), rt.history,
                            rt.monitoring_s).snapshot(0.0, hosts, instances, executor.scalings)
            actions = self.policy.initial_deployment(snap)
            if actions is None:  # the deployment every run starts from, once
                actions = initial_deployment(snap, rt.initial_instances)
                if actions:
                    executor.apply(0.0, actions, immediate=True)
                break
            if not actions:
                break
            executor.apply(0.0, actions, immediate=True)
        deadline = self.wall() + self.DEPLOY_TIMEOUT_S
        while True:
            pool.refresh()
            self._check_redis()
            crashed = pool.crashed()
            if crashed:
                c = crashed[0]
                raise LiveRunError(f"instance {c.instance.id} ({c.instance.operator}) exited during the initial "
                                   f"deployment (exit code {c.exit_code}): {c.error}")
            states = [i.state for i in pool.instance_views()]
            if states and all(s == InstanceState.running for s in states):
                return
            if self.wall() > deadline:
                raise LiveRunError(f"the initial deployment did not run within {self.DEPLOY_TIMEOUT_S:.0f} s: "
                                   f"{sorted(i.id + '=' + i.state.value for i in pool.instance_views())}")
            self.sleep(0.2)

    def _control_loop(self, pool, executor: LiveExecutor, monitor, provider: ProviderThread, tables) -> None:
        """Until the run's end: the watchdog, migrations and releases every POLL_S; a monitoring read
        every monitoring_s; a policy decision every reasoning_s on the durations of the last reads
        and the queue depths of that moment (as VISP read them live at decision time)."""
        rt = self.cfg.runtime
        next_monitor, next_reasoning, next_progress = rt.monitoring_s, rt.reasoning_s, self.PROGRESS_S
        while True:
            t = self.now()
            if t >= self.duration_s:
                return
            if provider.error is not None:
                raise LiveRunError(f"the data provider failed: {provider.error!r}") from provider.error
            self.sleep(max(0.0, min(self.POLL_S, next_monitor - t, next_reasoning - t, self.duration_s - t)))
            t = self.now()
            pool.refresh()
            self._check_redis()
            if self.network is not None:
                self.network.sync(executor.views(t)[1])
            executor.replace_crashed(t)
            executor.progress(t)
            if t >= self.duration_s:
                return  # the last interval is read once the provider has stopped
            if t >= next_monitor:
                next_monitor = self._next(next_monitor, rt.monitoring_s, t)
                if self._guard(t, monitor.observe, t, provider.emitted(), executor.take_purged(),
                               self._inactive(executor, t)) is not None:
                    self._record(monitor, tables, executor.views(t), t)
            if t >= next_progress:
                next_progress = self._next(next_progress, self.PROGRESS_S, t)
                self._print_progress(t, executor)
            if t >= next_reasoning:
                next_reasoning = self._next(next_reasoning, rt.reasoning_s, t)
                fresh = self._guard(t, monitor.read_depths)
                if fresh is None or monitor.last is None:
                    continue  # no decision on stale or missing data
                hosts, instances = executor.views(t)
                snap = monitor.snapshot(t, hosts, instances, executor.scalings, depths=fresh.depths)
                executor.apply(t, self.policy.decide(snap))

    def _redis_fault(self) -> Optional[str]:
        return self.redis_watch.check(self.now()) if self.redis_watch is not None else None

    def _redis_verdict(self) -> Optional[str]:
        """As `_redis_fault`, but a Redis that does not answer is waited for (RedisStateWatch.confirm)."""
        return self.redis_watch.confirm(self.now()) if self.redis_watch is not None else None

    def _check_redis(self) -> None:
        """End the run when Redis lost its state or stayed away (RedisStateWatch): one line, with the time."""
        reason = self._redis_fault()
        if reason:
            raise LiveRunError(reason)

    def _print_progress(self, t: float, executor: LiveExecutor) -> None:
        hosts, instances = executor.views(t)
        running = sum(1 for i in instances if i.state == InstanceState.running)
        print(f"live {self.run_id}: {t / 60:.1f}/{self.duration_s / 60:.1f} min, {running} of {len(instances)} "
              f"instance(s) running on {len(hosts)} host(s), {len(self.monitor_failures)} failed monitoring read(s)",
              file=sys.stderr, flush=True)

    @staticmethod
    def _inactive(executor: LiveExecutor, t: float) -> set:
        """Pool members switched off (their idle counts must not dilute the operator's utilisation)."""
        return {i.id for i in executor.views(t)[1] if not i.active}

    @staticmethod
    def _next(due: float, every: float, t: float) -> float:
        """The next due time after t (a slow cycle skips what it missed rather than bunching up)."""
        return due + every * (1 + int((t - due) // every))

    def _guard(self, t: float, read, *args):
        try:
            return read(*args)
        except MONITOR_ERRORS as exc:  # e.g. a broker restart: go on without this reading
            self.monitor_failures.append(f"t={t:.1f}s: {exc}")
            log.warning("monitoring at t=%.1f s failed: %s", t, exc)
            return None

    def _record(self, monitor, tables, views, t: float) -> None:
        hosts, instances = views
        record_reading(tables, monitor.last, monitor.operators, hosts, instances, monitor.topology.sinks)
        self.machine_load.interval(t, monitor.last.container_cpu_ms)
        if self.network is not None:  # the delays drawn and the items lost to unavailability
            self._guard(t, self.network.record, tables, t)

    def _drain_and_account(self, pool, monitor, provider: ProviderThread,
                           purged: Dict[str, int]) -> Tuple[Accounting, Optional[str]]:
        """Stop every instance gracefully (each finishes and acknowledges what it holds), then account
        for every emitted item: per operator, inflow = processed + still queued + dead-lettered + purged.
        Also returns what the drain left undone (None: every instance stopped in time)."""
        for inst in pool.instance_views():
            pool.stop_instance(inst.id)
        bound_s = max(pool.drain_timeout_s(o) for o in self.topology.operators) + 30.0
        undrained = None
        if not pool.wait_idle(bound_s):
            undrained = f"the drain did not finish: some instances did not stop within {bound_s:.0f} s"
            log.warning("%s: %s", self.prefix, undrained)
        processed, _ = monitor.totals()  # dead-lettered: counted where they are, in the dead-letter queues
        queues = self.network.instance_wiring() if self.network is not None else self.wiring
        depths = exact_depths(self.cfg, queues)
        emitted = provider.emitted()
        published = {**monitor.metrics.emitted_totals(), **emitted}  # per producer: sources and operators
        inflow = {o: 0 for o in self.topology.operators}
        for e in self.wiring.edges:
            inflow[e.consumer] += published.get(e.producer, 0)
        queued = {o: depths.depths.get(o, 0) for o in self.topology.operators}
        dead_letters = {o: depths.dead_letters.get(o, 0) for o in self.topology.operators}
        purged = {o: purged.get(o, 0) for o in self.topology.operators}
        timed_out = {o: n for o, n in monitor.metrics.timed_out_totals().items() if o in self.topology.operators}
        finished = finished_in_queues(self.cfg.backend.live, queues, queued)
        unavailable = self.network.unavailable_totals() if self.network is not None else {}
        missing = {o: inflow[o] - processed[o] - (queued[o] - finished.get(o, 0)) - dead_letters[o] - purged[o]
                   - timed_out.get(o, 0) - unavailable.get(o, 0) for o in self.topology.operators}
        return Accounting(emitted=emitted, inflow=inflow, processed=processed, queued=queued, dead=dead_letters,
                          purged=purged, finished_queued=finished, timed_out=timed_out, unavailable=unavailable,
                          missing={o: m for o, m in missing.items() if m}), undrained
