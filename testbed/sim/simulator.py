"""The simulated testbed: a time-stepped run of provider, queues, operators and cloud that asks the
policy for actions every reasoning cycle and produces the event-log tables of one run."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, Union

from testbed.actions import actions_table
from testbed.billing import price_per_btu
from testbed.config import ExperimentConfig
from testbed.emulation import Emulator
from testbed.model import InstanceState, Snapshot
from testbed.monitoring import InstanceCounts, Observer, SnapshotSettings, append_observation, new_monitor_tables
from testbed.observation import InstanceObservation, Observation, OperatorObservation
from testbed.placement.records import placements_table
from testbed.policies.base import Policy, initial_deployment
from testbed.rng import stream
from testbed.run_result import RunResult
from testbed.sim.clock import EPS, SourceTicks, StepClock
from testbed.sim.cluster import SimCluster
from testbed.sim.emulated import EmulatedNetwork
from testbed.sim.exact import ExactNetwork
from testbed.sim.incidents import IncidentProcess
from testbed.sim.network import CohortNetwork
from testbed.sim.recorder import SampleRecorder
from testbed.topology import Topology
from testbed.workloads.patterns import Pattern


class Simulation:
    def __init__(self, cfg: ExperimentConfig, policy: Policy, pattern: Pattern, seed: int, btu_minutes: int):
        self.cfg = cfg
        self.policy = policy
        self.pattern = pattern
        self.topology = Topology.from_config(cfg.topology)
        self.duration_s = cfg.duration_min * 60.0
        self.btu_s = btu_minutes * 60.0
        ops = self.topology.operators
        services = {o: self.topology.configs[o].service for o in ops}
        self.services = services
        self.recorder = SampleRecorder(
            ops, [services[o].slot_cv for o in ops], cfg.runtime.sample_every, cfg.runtime.sampling,
            cfg.runtime.measurement, seed,
        )
        network_cls = ExactNetwork if cfg.backend.exact else CohortNetwork
        emulation = cfg.backend.emulation
        self.emulator = Emulator(emulation, seed) if emulation.enabled else None  # per-item model only (config checks)
        self.network: Union[ExactNetwork, CohortNetwork]  # EmulatedNetwork is an ExactNetwork
        # operators in incident mode (topology.operators.<op>.emission.sim): a seeded process; none: nothing drawn
        incidents = IncidentProcess.of(self.topology, seed)
        self.incidents = incidents if incidents.any else None
        if self.emulator is not None:
            self.network = EmulatedNetwork(self.topology, cfg.backend.hop_latency_ms / 1000.0, self.recorder,
                                           self.emulator, emulation.provider_host, self.incidents)
        else:
            self.network = network_cls(self.topology, cfg.backend.hop_latency_ms / 1000.0, self.recorder,
                                       self.incidents)
        self.cluster = SimCluster(
            self.topology, cfg.infrastructure, self.btu_s,
            price_per_btu(btu_minutes, cfg.billing.price_per_10_minutes), stream(seed, "cloud"),
            purge=self.network.purge, sources=self.network.source_downtime,
        )
        self.observer = Observer(self.topology, SnapshotSettings.from_config(cfg, self.btu_s), cfg.runtime.history,
                                 cfg.runtime.monitoring_s)
        self.service_s = {o: services[o].slot_ms / 1000.0 for o in ops}
        self.clock = StepClock(cfg.backend.step_ms / 1000.0, self.duration_s)
        self.ticks = SourceTicks.of_run(self.topology, pattern, self.duration_s)
        self.network.set_sources(self.clock, self.ticks)
        if cfg.backend.shared_cores > 0 and isinstance(self.network, CohortNetwork):  # the config check: cohort only
            self.network.set_shared_cores(cfg.backend.shared_cores, cfg.backend.competing_threads)
        noisy = {o: services[o].step_cv for o in ops if services[o].step_cv > 0}
        if noisy:  # per-step capacity factors, one seeded stream per operator (none: nothing drawn)
            self.network.set_capacity_noise({
                o: stream(seed, f"capacity/{o}").gamma(1.0 / cv ** 2, cv ** 2, self.clock.steps)
                for o, cv in noisy.items()})
        self._ticks_at_monitor = 0
        self._processed_at_monitor = {o: 0 for o in ops}
        self._instance_ids: Dict[str, Tuple[str, int]] = {}  # parsed once
        self.tables: Dict[str, Dict[str, list]] = new_monitor_tables()
        self.host_traffic: Dict[str, list] = {k: [] for k in ("t_s", "source_host", "target_host", "items", "delay_ms")}

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Step by step: cloud events due at the step's start, the sources' ticks before its end, the
        network served; a monitoring read and a reasoning cycle after the steps they fall in. The
        network runs the steps between two of those moments in one call."""
        rt, clock = self.cfg.runtime, self.clock
        snapshot = self._snapshot(0.0)
        own = self.policy.initial_deployment(snapshot)  # a policy's own (static), step by step
        if own is None:
            self.cluster.apply(0.0, initial_deployment(snapshot, rt.initial_instances), immediate=True)
        else:
            for step in range(10):  # until it returns nothing
                if step:
                    own = self.policy.initial_deployment(self._snapshot(0.0))
                if not own:
                    break
                self.cluster.apply(0.0, own, immediate=True)
        next_monitor, next_reasoning = rt.monitoring_s, rt.reasoning_s
        version, step = -1, 0
        while step < clock.steps:
            self.cluster.process_events(clock.t0(step))
            if self.cluster.version != version:
                version = self.cluster.version
                self.network.set_capacity(*self._capacity())
                if isinstance(self.network, EmulatedNetwork):  # the emulator's
                    self.network.set_hosts({i.id: i.host for i in self.cluster.instances.values()})
            step = self.network.run(step, min(next_monitor, next_reasoning) - EPS, self.cluster.next_event())
            t1 = clock.t1(step - 1)
            if t1 >= next_monitor - EPS:
                self._monitor(t1)
                next_monitor += rt.monitoring_s
            if t1 >= next_reasoning - EPS and t1 < self.duration_s - EPS:
                self.cluster.apply(t1, self.policy.decide(self._snapshot(t1)))
                next_reasoning += rt.reasoning_s
        return RunResult(self._finish_tables(), self.duration_s)

    def _capacity(self) -> Any:
        serving = self.cluster.serving()
        slots = {o: len(serving[o]) * self.services[o].parallel for o in serving}
        instances = {o: [i.id for i in serving[o]] for o in serving}
        if self.cfg.backend.cpu_contention:
            self.service_s = self._contended_service_times(serving)
        return slots, self.service_s, instances

    def _contended_service_times(self, serving: Any) -> Dict[str, float]:
        """Busy slots needing more cores than a host has slow every instance on it alike."""
        demand: Dict[str, float] = {}
        for o, members in serving.items():
            svc = self.services[o]
            for inst in members:
                demand[inst.host] = demand.get(inst.host, 0.0) + svc.parallel * svc.cpu_cores
        cores = self.cfg.infrastructure.host_cpu_shares / 1024.0
        out = {}
        for o, members in serving.items():
            base = self.services[o].slot_ms / 1000.0
            factors = [max(1.0, demand[i.host] / cores) for i in members]
            out[o] = base * (sum(factors) / len(factors) if factors else 1.0)
        return out

    # -- monitoring and snapshots ----------------------------------------------------------
    def _monitor(self, t: float) -> None:
        net, cluster, ops = self.network, self.cluster, self.topology.operators
        means = dict(zip(ops, self.recorder.interval_means(), strict=True))
        flows = net.flows.take_interval()
        # serving counts migration sources until replaced, which instance views show as draining
        serving = cluster.serving()
        starting: Dict[str, int] = {o: 0 for o in ops}
        for inst in cluster.instances.values():
            if inst.state == InstanceState.starting:
                starting[inst.operator] += 1
        operators: Dict[str, OperatorObservation] = {}
        for o in ops:
            total = net.processed(o)
            dropped = {reason: n for (op, reason), n in flows.dropped.items() if op == o}
            operators[o] = OperatorObservation(received=flows.received[o],
                                               processed=total - self._processed_at_monitor[o],
                                               queue=net.depth(o), dropped=dropped, duration_ms=means[o])
            self._processed_at_monitor[o] = total
        emitted, self._ticks_at_monitor = self.ticks.items(self._ticks_at_monitor, net.ticks_emitted), net.ticks_emitted
        obs = Observation(t=t, interval_s=self.cfg.runtime.monitoring_s, input_items=emitted,
                          operators=operators, edges=flows.edges, instances=self._instance_observations(flows, serving))
        self.observer.observe(obs)
        if self.emulator is not None:
            for (u, v), (items, delay_ms) in sorted(self.emulator.take_interval().items()):
                for key, value in (("t_s", t), ("source_host", u), ("target_host", v), ("items", int(items)),
                                   ("delay_ms", delay_ms / items)):
                    self.host_traffic[key].append(value)
        append_observation(
            self.tables, obs,
            {o: InstanceCounts(len(serving[o]), starting[o], len({i.host for i in serving[o]})) for o in ops},
            leased=len(cluster.hosts), ready=sum(1 for h in cluster.hosts.values() if h.ready_at <= t),
        )

    def _instance_observations(self, flows: Any, serving: Any) -> tuple:
        """Every instance serving at the interval's end or having served in it, per operator in start
        order; utilisation = busy time / (interval x items in parallel), at most 1 (an item started
        near the end counts its whole service time)."""
        interval = self.cfg.runtime.monitoring_s
        served, busy_s, parse = flows.served, flows.busy_s, self._parse
        serving_ids = {o: [i.id for i in members] for o, members in serving.items()}  # in start order (the cluster's)
        known = {i for ids in serving_ids.values() for i in ids}
        gone_by: Dict[str, List[str]] = {}  # served in the interval, no longer serving (rarely any)
        for i in served:
            if i not in known:
                gone_by.setdefault(parse(i)[0], []).append(i)
        rows: List[InstanceObservation] = []
        for o in self.topology.operators:
            ids = serving_ids[o]
            gone = gone_by.get(o)
            if gone:
                ids = sorted(ids + gone, key=lambda i: parse(i)[1])
            per_slot = interval * self.services[o].parallel
            rows += [InstanceObservation(i, o, served.get(i, 0), min(1.0, busy_s.get(i, 0.0) / per_slot)) for i in ids]
        return tuple(rows)

    def _parse(self, instance: str) -> Tuple[str, int]:
        """(operator, start number) of an instance id `<operator>-<n>`."""
        parsed = self._instance_ids.get(instance)
        if parsed is None:
            operator, n = instance.rsplit("-", 1)
            parsed = self._instance_ids[instance] = (operator, int(n))
        return parsed

    def _snapshot(self, t: float) -> Snapshot:
        cluster, ops = self.cluster, self.topology.operators
        return self.observer.snapshot(t, cluster.host_views(t), cluster.instance_views(), cluster.scalings,
                                      depths={o: self.network.depth(o) for o in ops})

    def _finish_tables(self) -> Dict[str, Dict[str, list]]:
        rec = self.recorder
        net = self.network  # the ticks emitted, when (sources paused by restarts emit later and fewer)
        tables = {"load": self.ticks.emitted(net.tick_times, net.ticks_emitted).load_table(), **self.tables}
        tables["samples"] = {"t_s": rec.t, "operator": rec.operator, "instance": rec.instance,
                             "duration_ms": rec.duration_ms}
        flows = self.network.flows
        tables["latency"] = {"t_s": flows.latency_t, "operator": flows.latency_op, "latency_ms": flows.latency_ms}
        tables["actions"] = actions_table(self.cluster.records, self.policy.name)
        tables["leases"] = self.cluster.leases(self.duration_s)
        tables.update(self.policy.records())  # a policy's own tables (Daedalus: forecasts, capacity, recovery)
        tables["placements"] = placements_table(self.cluster.records, self.policy.placement)
        tables["host_traffic"] = self.host_traffic  # empty without the network emulation
        return tables
