"""Domain types shared by policies and backends: the immutable snapshot a policy sees and the
actions it returns (docs/architecture.md#policies-are-pure-functions-of-a-snapshot;
docs/papers/btu-provisioning.md#what-a-policy-sees)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, Optional, Tuple, Union


@dataclass(frozen=True)
class OperatorType:
    """Static description of one operator type (docs/papers/btu-provisioning.md#operators)."""

    name: str
    slo_ms: float
    cpu: int  # CPU shares, 1024 = one core
    memory: int  # MB reserved
    image_mb: int
    stateful: bool = False


@dataclass(frozen=True)
class OperatorView:
    """What a policy knows about one operator type at one moment
    (docs/papers/btu-provisioning.md#what-a-policy-sees)."""

    type: OperatorType
    n: int  # instances, including those still starting
    queue: int  # items waiting: ready + unacknowledged
    durations: Tuple[float, ...] = ()  # last N measured durations in ms, oldest first
    scalings: int = 0  # scale-ups and scale-downs executed for this type so far
    # the last monitoring interval (docs/architecture.md#observations): items that arrived in its
    # queue, items processed, items dropped (any reason), mean busy fraction of its active instances
    received: int = 0
    processed: int = 0
    dropped: int = 0
    utilisation: Optional[float] = None
    active: Optional[int] = None  # active pool members (None: every instance is active)

    @property
    def name(self) -> str:
        return self.type.name

    @property
    def duration(self) -> Optional[float]:
        """The current duration d: the newest measurement, None before any."""
        return self.durations[-1] if self.durations else None


class InstanceState(str, Enum):
    starting = "starting"
    running = "running"
    draining = "draining"  # stopping: finishes what it holds, takes nothing new


@dataclass(frozen=True)
class InstanceView:
    id: str
    operator: str
    host: str
    state: InstanceState
    started_at: float  # when it was requested (s)
    active: bool = True  # a pool member switched off (SetActive) is started but consumes nothing


@dataclass(frozen=True)
class HostView:
    id: str
    cpu: int  # total shares
    memory: int  # total MB
    cpu_free: int  # total minus the reservations of its (non-draining) instances
    memory_free: int
    leased_at: float
    btu_end: float  # when its paid time ends (s)
    images: frozenset[str]  # operator types whose image is cached (or being pulled)
    ready: bool  # booted; a host that is not ready can already receive placements
    cost: float  # price per BTU
    releasing: bool = False  # a release was decided; it goes once its instances have stopped


@dataclass(frozen=True)
class Snapshot:
    """Immutable view of the whole system at time t (seconds since the run started)."""

    t: float
    operators: Mapping[str, OperatorView]  # in topological order
    hosts: Tuple[HostView, ...]
    instances: Tuple[InstanceView, ...]
    btu_s: float
    reasoning_s: float
    penalty: float  # per delayed item
    input_rate: float  # items per second entering the topology
    max_hosts: int
    host_cpu: int  # the host type leased on demand
    host_memory: int
    monitoring_s: float = 15.0
    input_rates: Tuple[float, ...] = ()  # items/s per monitoring interval, oldest first (bounded history)
    edges: Tuple[Tuple[str, str], ...] = ()  # the topology: (source or upstream operator, operator)
    edge_items: Mapping[Tuple[str, str], int] = field(default_factory=dict)  # sent along each edge, last interval
    # per instance of the last interval: (items processed, busy fraction) -- what per-worker models need
    instance_stats: Mapping[str, Tuple[int, float]] = field(default_factory=dict)

    def host(self, host_id: str) -> HostView:
        for h in self.hosts:
            if h.id == host_id:
                return h
        raise KeyError(host_id)

    def instances_on(self, host_id: str) -> Tuple[InstanceView, ...]:
        return tuple(i for i in self.instances if i.host == host_id and i.state != InstanceState.draining)

    def instances_of(self, operator: str) -> Tuple[InstanceView, ...]:
        return tuple(i for i in self.instances if i.operator == operator and i.state != InstanceState.draining)


# Actions. Host ids starting with NEW_HOST_PREFIX refer to a host leased earlier in the same list;
# the executor binds them to the id it gives the new host.
NEW_HOST_PREFIX = "new:"


@dataclass(frozen=True)
class ScaleUp:
    operator: str
    host: str
    reason: str
    kind: str = field(default="scale_up", init=False)


@dataclass(frozen=True)
class ScaleDown:
    operator: str
    instance: str
    host: str
    reason: str
    kind: str = field(default="scale_down", init=False)


@dataclass(frozen=True)
class Migrate:
    """Start a copy of `instance` on `target`, then drain the old one once the copy runs."""

    operator: str
    instance: str
    host: str
    target: str
    reason: str
    kind: str = field(default="migrate", init=False)


@dataclass(frozen=True)
class LeaseHost:
    host: str  # a NEW_HOST_PREFIX reference
    reason: str
    kind: str = field(default="lease", init=False)


@dataclass(frozen=True)
class ProlongHost:
    host: str
    reason: str
    kind: str = field(default="prolong", init=False)


@dataclass(frozen=True)
class ReleaseHost:
    """Release once the host's instances have stopped, at the latest at its BTU end."""

    host: str
    reason: str
    kind: str = field(default="release", init=False)


@dataclass(frozen=True)
class SetActive:
    """Of the operator's started instances (a pre-started pool), `active` process items; the others
    consume nothing and hold no item. Switching costs no container start."""

    operator: str
    active: int
    reason: str
    kind: str = field(default="set_active", init=False)


@dataclass(frozen=True)
class Restart:
    """Stop the world: no operator processes anything for `downtime_s` seconds (a topology restart
    as DABS-Storm or Flink's reactive mode do it); with `purge`, everything queued is dropped and
    counted in the `dropped` table."""

    downtime_s: float
    purge: bool
    reason: str
    kind: str = field(default="restart", init=False)

    # what becomes of the sources' arrivals during the downtime (one of SOURCE_MODES):
    # `queue`: they enter the entry queues as usual, stamped with their emission time;
    # `hold`: they wait at the source and enter the topology when it is back (latency and timeout
    #   start then), as a spout that does not emit while it is down (live: the provider holds them);
    # `drop`: they never enter a queue (the simulator counts them as received and dropped, reason
    #   `source`, by the operators they were sent to; live: in the load table, never published);
    # `pause`: the source's trace clock stops for the downtime, so the trace resumes where it
    #   stopped (read at t minus the downtime so far): the same items, later; none accumulate or are
    #   lost, and what would fall after the run's end is not emitted
    source: str = "queue"
    # with purge: the entry queues too, where the sources' items wait for the operators they feed
    # (false keeps them: on the live broker they also buffer what the provider publishes)
    purge_entry: bool = True

    def __post_init__(self) -> None:
        check_source_mode("source", self.source)


@dataclass(frozen=True)
class ScaleTo:
    """A scaling target: `operator` should run `n` instances (job mode: the job `n` workers). Job
    mode's backends carry it out as a stop-the-world rescale; in operator mode the policy realises
    it on its plan (testbed/policies/scaling.py, `realise`: new instances placed, the newest
    stopped), so a backend never receives it there."""

    operator: str
    n: int
    reason: str
    kind: str = field(default="scale_to", init=False)


SOURCE_MODES = ("queue", "hold", "drop", "pause")  # Restart.source


def check_source_mode(key: str, value: str) -> None:
    if value not in SOURCE_MODES:
        raise ValueError(f"{key}: must be one of {', '.join(SOURCE_MODES)}, got {value!r}")


Action = Union[ScaleUp, ScaleDown, Migrate, LeaseHost, ProlongHost, ReleaseHost, SetActive, Restart, ScaleTo]
