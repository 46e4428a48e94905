"""The data provider of a live run, in a thread of the runtime's process: the same Provider and
absolute-schedule Emitter as `testbed provider run`, publishing to the run's source exchanges
(or topics), counting what it emitted so the control loop knows the input rate and the load table."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

from data_provider.config import ProviderConfig, TransportName
from data_provider.emitter import Emitter, SystemClock, ticks_for
from data_provider.provider import Provider, make_transport, source_specs
from data_provider.source_gate import GatedEmit, SourceGate
from operators.wiring import Wiring
from testbed.config import ExperimentConfig
from testbed.workloads.patterns import Pattern


class ProviderThread:
    def __init__(self, cfg: ExperimentConfig, pattern: Pattern, wiring: Wiring, seed: int, duration_s: float,
                 clock: Optional[SystemClock] = None, wrap: Optional[Callable[[Any], Any]] = None):
        live = cfg.backend.live
        self.cfg = ProviderConfig(
            pattern=cfg.pattern, topology=cfg.topology, transport=TransportName(live.transport.value),
            seed=seed, run_id=wiring.prefix, prefix=wiring.prefix, amqp_url=live.amqp_url,
            kafka_bootstrap=live.kafka_bootstrap, kafka_partitions=live.kafka_partitions, declare=True,
            payloads=live.payloads,
        )
        self.transport = make_transport(self.cfg, wiring)
        if wrap is not None:  # e.g. the emulated network's sender (testbed/live/netem.py)
            self.transport = wrap(self.transport)
        tick_s = cfg.topology.tick_ms / 1000.0
        self.provider = Provider(pattern, source_specs(self.cfg), self.transport, seed, cfg.topology.tick_ms,
                                 self.cfg.payloads, clock, self.cfg.max_machines, self.cfg.image_compress_level)
        self.gate = SourceGate()  # closed by a restart acting on the source (testbed/live/executor.py)
        self.gated = GatedEmit(self.provider.emit_tick, self.gate, self.provider.clock, self.provider.drop_tick, tick_s)
        self.emitter = Emitter(tick_s, ticks_for(duration_s, tick_s), self.gated, self.provider.clock)
        self._thread = threading.Thread(target=self._run, name="provider", daemon=True)
        self.error: Optional[BaseException] = None

    def start(self, timeout_s: float = 30.0) -> None:
        self.transport.start(timeout_s)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.emitter.run()
            self.gated.release()  # held by a restart near the end: published, so accounted in the queues
        except BaseException as exc:  # surfaced to the control loop, which fails the run
            self.error = exc

    def emitted(self) -> Dict[str, int]:
        """Items emitted per source so far (a copy; the provider thread keeps counting)."""
        return dict(self.provider.items)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, flush_timeout_s: float = 60.0) -> bool:
        """Stop emitting, wait until every emitted item is confirmed by the broker; True if all were."""
        self.emitter.stop()
        if self._thread.is_alive():
            self._thread.join()
        flushed = self.transport.flush(flush_timeout_s)
        self.transport.close(flush_timeout_s)
        return flushed

    def load_table(self) -> Dict[str, list]:
        return {k: list(v) for k, v in self.provider.load.items()}
