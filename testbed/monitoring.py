"""What the simulator and the live runtime share about monitoring: the per-interval event-log rows
(`processed`, `queues`, `instances`, `hosts`, `samples`), the window of the last N interval means
per operator, and the assembly of the `Snapshot` a policy sees
(docs/papers/btu-provisioning.md#what-a-policy-sees).

Both backends measure differently (a network model vs. RabbitMQ/Redis/Docker) but must record the
same columns in the same order and hand policies the same snapshot, so those two steps live here.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from testbed.config import ExperimentConfig
from testbed.model import HostView, InstanceState, InstanceView, OperatorView, Snapshot
from testbed.observation import Observation
from testbed.topology import Topology

Tables = Dict[str, Dict[str, list]]

# column order as in testbed/eventlog.py TABLES (the schema module stays the authority on types)
MONITOR_COLUMNS: Dict[str, Tuple[str, ...]] = {
    "processed": ("t_s", "operator", "items"),
    "queues": ("t_s", "operator", "depth"),
    "instances": ("t_s", "operator", "instances", "starting", "hosts"),
    "hosts": ("t_s", "leased", "ready"),
}
OBSERVATION_COLUMNS: Dict[str, Tuple[str, ...]] = {
    "edges": ("t_s", "source", "target", "items"),
    "instance_stats": ("t_s", "operator", "instance", "processed", "utilisation"),
    "dropped": ("t_s", "operator", "reason", "items"),
}
SAMPLE_COLUMNS: Tuple[str, ...] = ("t_s", "operator", "instance", "duration_ms")
LATENCY_COLUMNS: Tuple[str, ...] = ("t_s", "operator", "latency_ms")


def new_monitor_tables(samples: bool = False) -> Tables:
    """Empty column lists of the monitoring tables (plus `samples` and `latency` if asked: the live
    runtime appends them per reading, the simulator's recorder keeps its own)."""
    tables: Tables = {name: {c: [] for c in cols} for name, cols in {**MONITOR_COLUMNS, **OBSERVATION_COLUMNS}.items()}
    if samples:
        tables["samples"] = {c: [] for c in SAMPLE_COLUMNS}
        tables["latency"] = {c: [] for c in LATENCY_COLUMNS}
    return tables


def append_observation(tables: Tables, obs: Observation, instances: Mapping[str, "InstanceCounts"],
                       leased: int, ready: int) -> None:
    """The rows of one monitoring interval: `processed`, `queues`, `instances`, `hosts`, and the
    observation's `edges` (every edge, every interval), `instance_stats` and `dropped` (non-zero)."""
    ops = list(obs.operators)
    append_monitor_rows(tables, obs.t, ops, {o: v.processed for o, v in obs.operators.items()},
                        {o: v.queue for o, v in obs.operators.items()}, instances, leased, ready)
    edges = tables["edges"]
    for (source, target), items in obs.edges.items():
        edges["t_s"].append(obs.t)
        edges["source"].append(source)
        edges["target"].append(target)
        edges["items"].append(items)
    # column by column: a simulated run has some 40,000 of these rows
    stats, rows = tables["instance_stats"], obs.instances
    stats["t_s"].extend([obs.t] * len(rows))
    stats["operator"].extend([i.operator for i in rows])
    stats["instance"].extend([i.instance for i in rows])
    stats["processed"].extend([i.processed for i in rows])
    stats["utilisation"].extend([i.utilisation for i in rows])
    dropped = tables["dropped"]
    for o, view in obs.operators.items():
        for reason, items in sorted(view.dropped.items()):
            if items:
                dropped["t_s"].append(obs.t)
                dropped["operator"].append(o)
                dropped["reason"].append(reason)
                dropped["items"].append(items)


@dataclass(frozen=True)
class InstanceCounts:
    """One operator's row of the `instances` table."""

    running: int  # processing items
    starting: int  # requested, not yet running
    hosts: int  # distinct hosts of the running instances


def instance_counts(operators: Sequence[str], instances: Iterable[InstanceView]) -> Dict[str, InstanceCounts]:
    """`instances` rows from instance views: draining instances take nothing new, so they count
    neither as running nor as starting."""
    running: Dict[str, int] = {o: 0 for o in operators}
    starting: Dict[str, int] = {o: 0 for o in operators}
    hosts: Dict[str, set] = {o: set() for o in operators}
    for inst in instances:
        if inst.operator not in running:
            continue  # not an operator of this topology (foreign container): not ours to count
        if inst.state == InstanceState.running:
            running[inst.operator] += 1
            hosts[inst.operator].add(inst.host)
        elif inst.state == InstanceState.starting:
            starting[inst.operator] += 1
    return {o: InstanceCounts(running[o], starting[o], len(hosts[o])) for o in operators}


def append_monitor_rows(tables: Tables, t: float, operators: Sequence[str], processed: Mapping[str, int],
                        depths: Mapping[str, int], instances: Mapping[str, InstanceCounts],
                        leased: int, ready: int) -> None:
    """Append one monitoring interval ending at t: one row per operator (in the given order) to
    `processed`, `queues` and `instances`, and one row to `hosts`."""
    proc, queues, ins, hosts = (tables[k] for k in ("processed", "queues", "instances", "hosts"))
    for o in operators:
        proc["t_s"].append(t)
        proc["operator"].append(o)
        proc["items"].append(processed[o])
        queues["t_s"].append(t)
        queues["operator"].append(o)
        queues["depth"].append(depths[o])
        c = instances[o]
        ins["t_s"].append(t)
        ins["operator"].append(o)
        ins["instances"].append(c.running)
        ins["starting"].append(c.starting)
        ins["hosts"].append(c.hosts)
    hosts["t_s"].append(t)
    hosts["leased"].append(leased)
    hosts["ready"].append(ready)


def append_samples(tables: Tables, t_s: Sequence[float], operator: Sequence[str], instance: Sequence[str],
                   duration_ms: Sequence[float]) -> None:
    s = tables["samples"]
    s["t_s"].extend(t_s)
    s["operator"].extend(operator)
    s["instance"].extend(instance)
    s["duration_ms"].extend(duration_ms)


def interval_means(operators: Sequence[str], operator: Iterable[str],
                   duration_ms: Iterable[float]) -> Dict[str, Optional[float]]:
    """Mean duration per operator of the samples of one interval (None: no sample), the live
    counterpart of `SampleRecorder.interval_means`. Samples of unknown operators are ignored."""
    sums = {o: 0.0 for o in operators}
    counts = {o: 0 for o in operators}
    for o, d in zip(operator, duration_ms, strict=True):
        if o in sums:
            sums[o] += d
            counts[o] += 1
    return {o: (sums[o] / counts[o] if counts[o] else None) for o in operators}


class DurationWindows:
    """The last N interval means per operator, oldest first (docs/papers/btu-provisioning.md
    #what-a-policy-sees: d1..dN). An interval without samples leaves the window unchanged rather than
    inserting a gap."""

    def __init__(self, operators: Sequence[str], n: int):
        self.operators = tuple(operators)
        self._windows: Dict[str, Deque[float]] = {o: deque(maxlen=n) for o in operators}

    def push(self, means: Mapping[str, Optional[float]]) -> None:
        for o in self.operators:
            mean = means.get(o)
            if mean is not None:
                self._windows[o].append(mean)

    def of(self, operator: str) -> Tuple[float, ...]:
        return tuple(self._windows[operator])


@dataclass(frozen=True)
class SnapshotSettings:
    """The run-constant part of every snapshot."""

    btu_s: float
    reasoning_s: float
    penalty: float
    max_hosts: int
    host_cpu: int
    host_memory: int

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, btu_s: float) -> "SnapshotSettings":
        infra = cfg.infrastructure
        return cls(btu_s=btu_s, reasoning_s=cfg.runtime.reasoning_s, penalty=cfg.billing.penalty_per_item,
                   max_hosts=infra.max_hosts, host_cpu=infra.host_cpu_shares, host_memory=infra.host_memory_mb)


def counted(operators: Sequence[str], instances: Iterable[InstanceView]) -> Dict[str, int]:
    """n per operator as a policy counts it: every instance that is not draining (starting ones
    included, docs/papers/btu-provisioning.md#what-a-policy-sees)."""
    n = {o: 0 for o in operators}
    for inst in instances:
        if inst.state != InstanceState.draining and inst.operator in n:
            n[inst.operator] += 1
    return n


class Observer:
    """The histories a snapshot shows (duration windows, input rates) and the latest observation;
    builds the policy's snapshot. One per run, in both backends."""

    def __init__(self, topology: Topology, settings: SnapshotSettings, history: int, monitoring_s: float):
        self.topology = topology
        self.operators = topology.operators
        self.settings = settings
        self.monitoring_s = monitoring_s
        self.durations = DurationWindows(self.operators, history)
        self.rates: Deque[float] = deque(maxlen=history)
        self.last: Optional[Observation] = None

    def observe(self, obs: Observation) -> None:
        self.durations.push({o: v.duration_ms for o, v in obs.operators.items()})
        self.rates.append(obs.input_rate)
        self.last = obs

    def snapshot(self, t: float, hosts: Tuple[HostView, ...], instances: Tuple[InstanceView, ...],
                 scalings: Mapping[str, int], depths: Optional[Mapping[str, int]] = None) -> Snapshot:
        """What the policy sees at t. `depths`: queue depths of that moment (default: the latest
        observation's; zero before the first)."""
        last = self.last
        if depths is None:
            depths = {o: (last.operators[o].queue if last else 0) for o in self.operators}
        n = counted(self.operators, instances)
        active = {o: 0 for o in self.operators}
        pooled = set()
        for i in instances:
            if i.state != InstanceState.draining and i.operator in active:
                active[i.operator] += i.active
                if not i.active:
                    pooled.add(i.operator)
        utilisation = last.utilisation() if last else {}
        views: Dict[str, OperatorView] = {}
        for o in self.operators:
            seen = last.operators[o] if last else None
            views[o] = OperatorView(
                type=self.topology.types[o], n=n[o], queue=depths[o], durations=self.durations.of(o),
                scalings=scalings.get(o, 0), received=seen.received if seen else 0,
                processed=seen.processed if seen else 0, dropped=sum(seen.dropped.values()) if seen else 0,
                utilisation=utilisation.get(o), active=active[o] if o in pooled else None)
        st = self.settings
        return Snapshot(
            t=t, operators=views, hosts=hosts, instances=instances, btu_s=st.btu_s, reasoning_s=st.reasoning_s,
            penalty=st.penalty, input_rate=last.input_rate if last else 0.0, max_hosts=st.max_hosts,
            host_cpu=st.host_cpu, host_memory=st.host_memory, monitoring_s=self.monitoring_s,
            input_rates=tuple(self.rates), edges=self.topology.edges,
            edge_items=dict(last.edges) if last else {},
            instance_stats={i.instance: (i.processed, i.utilisation) for i in last.instances} if last else {},
        )


def hosts_row(hosts: Sequence[HostView]) -> Tuple[int, int]:
    """(leased, ready) of the `hosts` table from host views."""
    return len(hosts), sum(1 for h in hosts if h.ready)


__all__: List[str] = [
    "MONITOR_COLUMNS", "SAMPLE_COLUMNS", "DurationWindows", "InstanceCounts", "SnapshotSettings", "Tables",
    "Observer", "append_monitor_rows", "append_observation", "append_samples", "counted", "hosts_row",
    "instance_counts",
    "interval_means", "new_monitor_tables",
]
