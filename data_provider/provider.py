"""The data provider: simulated machines emitting sensor items on the tick schedule.

Every 480 ms tick, each active machine (the pattern gives how many: machines 1..n are active)
emits ``items_per_tick`` items per source of the topology: 5 availability readings, 1 production
display image and 10 temperature readings in the OEE topology. Items go out through a transport
(RabbitMQ with confirms, Kafka, or memory) to the source's exchange/topic named by
``operators.wiring``, each in an ``operators.envelope.Envelope``. Per tick and source one row goes
into the run's ``load`` table (t_s, machines, source, items, lateness_ms).

The readings of tick k are taken during the tick before it is due (the last one at the due time);
the production record carries the due time. All timestamps are epoch milliseconds.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from data_provider.config import (
    ProviderConfig,
    TransportName,
    amqp_url,
    kafka_bootstrap,
    parse_duration,
    to_plain,
    validate_provider,
)
from data_provider.display_image import render_display
from data_provider.emitter import Clock, Emitter, SystemClock, Tick, TickResult, ticks_for
from data_provider.transports import (
    ConfirmCallback,
    KafkaPublisher,
    MemoryTransport,
    OutMessage,
    RabbitPublisher,
    Transport,
)
from operators.envelope import Envelope, amqp_properties, image_payload
from operators.wiring import Wiring, wiring_for
from testbed.rng import stream
from testbed.workloads.patterns import Pattern, make_pattern
from testbed.workloads.payloads import AVAILABILITY, PRODUCTION, TEMPERATURE, Machine, PayloadConfig


class ProviderError(RuntimeError):
    pass


@dataclass(frozen=True)
class SourceSpec:
    name: str
    kind: str  # availability | temperature | production
    items_per_tick: int


def source_specs(cfg: ProviderConfig) -> List[SourceSpec]:
    return [SourceSpec(name, cfg.kinds[name], int(src.items_per_tick)) for name, src in cfg.topology.sources.items()]


@dataclass
class ProviderResult:
    run_dir: Optional[Path]
    ticks: int
    items: Dict[str, int]  # per source
    lateness_ms: np.ndarray  # per tick
    emit_ms: np.ndarray  # per tick: how long emitting it took
    transport: Dict[str, Any]
    flushed: bool
    load: Dict[str, list] = field(repr=False, default_factory=dict)

    @property
    def total_items(self) -> int:
        return sum(self.items.values())

    def lateness_percentile(self, q: float) -> float:
        return float(np.percentile(self.lateness_ms, q)) if self.lateness_ms.size else 0.0


class Provider:
    """Machines + payload generators + transport for one run; ``emit_tick`` is the emitter's callback."""

    def __init__(self, pattern: Pattern, sources: Sequence[SourceSpec], transport: Transport, seed: int,
                 tick_ms: float, payloads: Optional[PayloadConfig] = None, clock: Optional[Clock] = None,
                 max_machines: int = 64, image_compress_level: int = 3):
        self.pattern = pattern
        self.sources = list(sources)
        self.transport = transport
        self.seed = int(seed)
        self.tick_ms = float(tick_ms)
        self.payloads = payloads or PayloadConfig()
        self.clock: Clock = clock or SystemClock()
        self.max_machines = max_machines
        self.image_compress_level = image_compress_level
        self.machines: List[Machine] = []
        self.load: Dict[str, list] = {"t_s": [], "machines": [], "source": [], "items": [], "lateness_ms": []}
        self.items: Dict[str, int] = {s.name: 0 for s in self.sources}

    def _active(self, n: int) -> List[Machine]:
        if n > self.max_machines:
            raise ProviderError(f"pattern {self.pattern.name!r} asks for {n} machines, more than max_machines "
                                f"({self.max_machines})")
        while len(self.machines) < n:
            self.machines.append(Machine(len(self.machines), self.seed, self.payloads))
        return self.machines[:n]

    def messages_for(self, tick: Tick) -> tuple[int, Dict[str, int], List[OutMessage]]:
        """The tick's messages (and machines, items per source), without publishing them."""
        n = int(self.pattern.machines_at(tick.pattern_t_s))
        active = self._active(n)
        for machine in active:
            machine.step()
        sent_ms = self.clock.wall_ms()
        messages: List[OutMessage] = []
        counts: Dict[str, int] = {}
        for src in self.sources:
            items = src.items_per_tick
            spacing = self.tick_ms / items if items else 0.0
            first_ms = tick.due_wall_ms - self.tick_ms + spacing  # readings during the tick, last one at due
            before = len(messages)
            for machine in active:
                if items == 0:
                    continue
                if src.kind == AVAILABILITY:
                    payloads: List[Any] = machine.availability(int(first_ms), spacing, items)
                    stamps = [p["timestamp_ms"] for p in payloads]
                elif src.kind == TEMPERATURE:
                    payloads = machine.temperature(int(first_ms), spacing, items)
                    stamps = [p["timestamp_ms"] for p in payloads]
                elif src.kind == PRODUCTION:
                    stamps = [tick.due_wall_ms - int((items - 1 - i) * spacing) for i in range(items)]
                    payloads = [image_payload(render_display(machine.production(ts), self.image_compress_level))
                                for ts in stamps]
                else:
                    raise ProviderError(f"source {src.name}: unknown payload kind {src.kind!r}")
                for i, (payload, ts) in enumerate(zip(payloads, stamps, strict=True)):
                    item_id = f"{machine.machine_id}/{src.name}/{tick.k}/{i}"
                    env = Envelope(item_id, machine.machine_id, src.kind, int(ts), sent_ms, payload)
                    messages.append(OutMessage(src.name, item_id, machine.machine_id, env.encode(),
                                               amqp_properties(env)))
            counts[src.name] = len(messages) - before
        return n, counts, messages

    def emit_tick(self, tick: Tick) -> None:
        n, counts, messages = self.messages_for(tick)
        self.transport.publish_batch(messages)
        for src in self.sources:
            self.load["t_s"].append(tick.t_s)
            self.load["machines"].append(n)
            self.load["source"].append(src.name)
            self.load["items"].append(counts[src.name])
            self.load["lateness_ms"].append(tick.lateness_ms)
            self.items[src.name] += counts[src.name]

    def drop_tick(self, tick: Tick) -> int:
        """As emit_tick, but nothing is published nor counted as emitted: only the load table has the
        tick (a restart that drops arrivals, data_provider/source_gate.py); returns its items."""
        n, counts, _ = self.messages_for(tick)  # made all the same: the machines move on
        for src in self.sources:
            for key, value in (("t_s", tick.t_s), ("machines", n), ("source", src.name),
                               ("items", counts[src.name]), ("lateness_ms", tick.lateness_ms)):
                self.load[key].append(value)
        return sum(counts.values())


def default_run_id(pattern_name: str) -> str:
    return f"{pattern_name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')[:-3]}"


def make_transport(cfg: ProviderConfig, wiring: Wiring, on_confirm: Optional[ConfirmCallback] = None) -> Transport:
    producers = list(cfg.topology.sources)
    if cfg.transport == TransportName.rabbitmq:
        return RabbitPublisher(amqp_url(cfg), wiring, producers, declare=cfg.declare,
                               max_unconfirmed=cfg.max_unconfirmed, on_confirm=on_confirm)
    if cfg.transport == TransportName.kafka:
        return KafkaPublisher(kafka_bootstrap(cfg), wiring, producers, create=cfg.declare,
                              partitions=cfg.kafka_partitions, on_confirm=on_confirm)
    return MemoryTransport(on_confirm=on_confirm)


def run_provider(cfg: ProviderConfig, *, clock: Optional[Clock] = None, transport: Optional[Transport] = None,
                 on_confirm: Optional[ConfirmCallback] = None, write_log: bool = True,
                 on_tick: Optional[Callable[[TickResult], None]] = None,
                 emitter_hook: Optional[Callable[[Emitter], None]] = None) -> ProviderResult:
    """One provider run: emits for ``cfg.duration``, flushes, writes load table and manifest.

    ``emitter_hook`` receives the emitter before it starts (e.g. to stop it from a signal handler).
    """
    from testbed.eventlog import finish_manifest

    validate_provider(cfg)
    run_id = cfg.run_id or default_run_id(cfg.pattern.name)
    prefix = cfg.prefix or run_id
    wiring = wiring_for(cfg.topology, prefix)
    duration_s = parse_duration(cfg.duration)
    tick_s = cfg.topology.tick_ms / 1000.0
    n_ticks = ticks_for(duration_s, tick_s)
    pattern_seed = cfg.seed + cfg.pattern.seed_offset
    pattern = make_pattern(cfg.pattern, stream(pattern_seed, "pattern"))
    transport = transport or make_transport(cfg, wiring, on_confirm)
    provider = Provider(pattern, source_specs(cfg), transport, cfg.seed, cfg.topology.tick_ms, cfg.payloads,
                        clock, cfg.max_machines, cfg.image_compress_level)

    run_dir, log = _open_log(cfg, run_id, pattern_seed) if write_log else (None, None)
    checkpoint_every = max(1, int(round(cfg.checkpoint_s / tick_s)))

    def after_tick(result: TickResult) -> None:
        if log is not None and (result.tick.k + 1) % checkpoint_every == 0:
            log.write("load", provider.load)
        if on_tick is not None:
            on_tick(result)

    emitter = Emitter(tick_s, n_ticks, provider.emit_tick, provider.clock, on_tick=after_tick)
    if emitter_hook is not None:
        emitter_hook(emitter)
    status, error, flushed = "incomplete", None, False
    try:
        error, flushed = _emit_and_flush(cfg, emitter, transport, n_ticks)
        status = "complete" if error is None else status
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if log is not None and run_dir is not None:
            log.write("load", provider.load)
            finish_manifest(run_dir, status, error, sim_duration_s=len(emitter.results) * tick_s)
    return ProviderResult(
        run_dir=run_dir, ticks=len(emitter.results), items=dict(provider.items),
        lateness_ms=np.array([r.tick.lateness_ms for r in emitter.results]),
        emit_ms=np.array([r.emit_ms for r in emitter.results]),
        transport=transport.stats.as_dict(), flushed=flushed, load=provider.load,
    )


def _open_log(cfg: ProviderConfig, run_id: str, pattern_seed: int) -> Tuple[Path, Any]:
    """The run's folder under out/<pattern>/<run id>, its event log and its manifest."""
    from testbed.eventlog import EventLog, Manifest, code_revision, package_versions, write_manifest

    run_dir = Path(cfg.out) / cfg.pattern.name / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(run_dir, Manifest(
        run_id=run_id, experiment="provider", pattern=cfg.pattern.name, config=f"provider-{cfg.transport.value}",
        policy="none", btu_minutes=0, rep=0, seed=cfg.seed, seeds={"provider": cfg.seed, "pattern": pattern_seed},
        backend=f"provider-{cfg.transport.value}", resolved_config=to_plain(cfg),
        code_revision=code_revision(), versions=package_versions(),
    ))
    return run_dir, EventLog(run_dir)


def _emit_and_flush(cfg: ProviderConfig, emitter: Emitter, transport: Transport,
                    n_ticks: int) -> Tuple[Optional[str], bool]:
    """Emits every tick and waits for the transport's confirmations: (why the run is incomplete or None, flushed)."""
    transport.start(cfg.connect_timeout_s)
    try:
        emitter.run()
    finally:
        flushed = transport.flush(cfg.flush_timeout_s)
        transport.close(cfg.flush_timeout_s)
    if emitter.stopped:
        return f"stopped after {len(emitter.results)} of {n_ticks} ticks", flushed
    if not flushed:
        return f"not every item confirmed within {cfg.flush_timeout_s} s: {transport.stats.as_dict()}", flushed
    return None, flushed


def format_result(result: ProviderResult) -> str:
    lines = [f"ticks: {result.ticks}   items: {result.total_items} "
             f"({', '.join(f'{k} {v}' for k, v in result.items.items())})"]
    if result.lateness_ms.size:
        lines.append(f"tick lateness ms: p50 {result.lateness_percentile(50):.2f}"
                     f"  p99 {result.lateness_percentile(99):.2f}  max {float(result.lateness_ms.max()):.2f}"
                     f"   emit ms p99 {float(np.percentile(result.emit_ms, 99)):.2f}")
    t = result.transport
    lines.append(f"transport: published {t['published']}  confirmed {t['confirmed']}  republished {t['republished']}"
                 f"  reconnects {t['reconnects']}  failed {t['failed']}"
                 + ("" if result.flushed else "  (NOT all confirmed)"))
    if result.run_dir is not None:
        lines.append(f"load table: {result.run_dir / 'load.parquet'}")
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    """`testbed provider run [OVERRIDES...]` / `testbed provider config [OVERRIDES...]`."""
    import signal

    from data_provider.config import compose_provider
    from testbed.config import ConfigError

    usage = ("usage: testbed provider run [OVERRIDES...]     e.g. pattern=stepwise duration=10m transport=rabbitmq\n"
             "       testbed provider config [OVERRIDES...]  print the resolved config")
    if not argv or argv[0] not in ("run", "config"):
        print(usage, file=sys.stderr)
        return 2
    try:
        cfg = compose_provider(argv[1:])
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - Hydra's composition errors name the key
        if type(exc).__module__.startswith(("hydra", "omegaconf")):
            cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
            print(f"config error: {exc}{cause}", file=sys.stderr)
            return 2
        raise
    if argv[0] == "config":
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(OmegaConf.structured(cfg)), end="")
        return 0

    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # connection failures: our publisher reports them once
    logging.getLogger("kafka").setLevel(logging.ERROR)

    def hook(emitter: Emitter) -> None:
        def stop(signum: int, _frame: Any) -> None:
            print(f"signal {signum}: stopping after this tick", file=sys.stderr)
            emitter.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    duration_s = parse_duration(cfg.duration)
    ticks = ticks_for(duration_s, cfg.topology.tick_ms / 1000.0)
    print(f"provider: pattern {cfg.pattern.name}, {duration_s:g} s ({ticks} ticks), transport {cfg.transport.value}",
          file=sys.stderr)
    from data_provider.transports import TransportError

    try:
        result = run_provider(cfg, emitter_hook=hook)
    except TransportError as exc:
        print(f"provider: {exc}", file=sys.stderr)
        return 1
    print(format_result(result))
    ok = result.flushed and result.ticks == ticks
    return 0 if ok else 1


def expected_items(pattern: Pattern, sources: Sequence[SourceSpec], n_ticks: int, tick_s: float) -> Dict[str, int]:
    """Items per source that ``n_ticks`` ticks of the pattern imply."""
    machines = pattern.series(np.arange(n_ticks) * tick_s)
    return {s.name: int(machines.sum()) * s.items_per_tick for s in sources}


__all__ = ["Provider", "ProviderResult", "SourceSpec", "run_provider", "expected_items", "main"]
