"""The live runtime's side of the emulated network (`backend.emulation.enabled` with the live backend;
operators/netem.py has the senders' side, docs/papers/odp.md#the-emulated-network-live).

`LiveNetwork` keeps the network view the senders read (serving instances with their hosts, A_u, and
mu, sigma, A_uv per host pair, from testbed/emulation.py's `NetworkModel`, so ODP and the senders see
one network), gives every instance its own queues before its container starts (the executor's pool
is wrapped: `pool`), lets the data provider send from `backend.emulation.provider_host` (`sender`),
folds the per-instance queues into the depths the monitor and the final accounting read
(`depths`, `wiring`), and turns the senders' reports into `host_traffic` rows and `dropped` rows
with reason `unavailable` (`record`).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from operators import wiring as wiring_mod
from operators.netem import (UNAVAILABLE, EmulatedSender, Interval, Link, NetView, parse_entries, stream_key,
                             unavailable_hash, view_key)
from operators.transports import declare_queues
from operators.wiring import Wiring, instance_edges
from testbed.emulation import EmulationConfig, NetworkModel
from testbed.model import InstanceState, InstanceView

log = logging.getLogger(__name__)

PROVIDER = "provider"  # the data provider's name as a sender (its seeded draws)


def serving_members(instances: Sequence[InstanceView]) -> Dict[str, Tuple[Tuple[str, str], ...]]:
    """Per operator, the instances senders may choose: running and switched on; while an operator
    has none, its starting ones (items wait in their queues until they run)."""
    running: Dict[str, List[Tuple[str, str]]] = {}
    starting: Dict[str, List[Tuple[str, str]]] = {}
    for i in instances:
        if not i.active:
            continue
        if i.state == InstanceState.running:
            running.setdefault(i.operator, []).append((i.id, i.host))
        elif i.state == InstanceState.starting:
            starting.setdefault(i.operator, []).append((i.id, i.host))
    return {o: tuple(sorted(running.get(o) or starting.get(o) or ()))
            for o in sorted(set(running) | set(starting))}


def network_view(model: NetworkModel, members: Mapping[str, Tuple[Tuple[str, str], ...]],
                 hosts: Sequence[str]) -> NetView:
    """The view of ``hosts`` (every host an instance was placed on, and the provider's)."""
    ordered = sorted(set(hosts))
    return NetView(
        members=dict(members),
        hosts={h: model.host_availability(h) for h in ordered},
        links={(u, v): Link(model.mean_delay_ms(u, v), model.sd_delay_ms(u, v), model.link_availability(u, v))
               for u in ordered for v in ordered if u != v},
    )


class _NetemPool:
    """The host pool as the executor sees it: an instance's queues are declared and its host is in
    the view before its container starts; it learns its host and seed from its environment."""

    def __init__(self, pool: Any, network: "LiveNetwork"):
        self._pool = pool
        self._network = network

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def start_instance(self, operator: str, host_id: str, env: Mapping[str, str], t: float,
                       immediate: bool = False, volumes: Optional[Mapping[str, Mapping[str, str]]] = None) -> str:
        env = {**env, "EMULATION_HOST": host_id, "EMULATION_SEED": str(self._network.seed)}
        ident = self._pool.start_instance(operator, host_id, env, t, immediate=immediate, volumes=volumes)
        self._network.register(ident, operator, host_id)
        return ident


class LiveNetwork:
    def __init__(self, emulation: EmulationConfig, wiring: Wiring, amqp_url: str, redis: Any, seed: int):
        self.emulation = emulation
        self.model = NetworkModel(emulation)
        self.wiring = wiring
        self.amqp_url = amqp_url
        self.redis = redis
        self.seed = seed
        self.instances: Dict[str, str] = {}  # every instance given queues in this run -> operator
        self.hosts: Dict[str, str] = {}  # instance -> host
        self.members: Dict[str, Tuple[Tuple[str, str], ...]] = {}
        self._written: Optional[str] = None
        self._last_id = "0-0"
        self.malformed = 0

    # -- instances and the view ------------------------------------------------------------
    def pool(self, pool: Any) -> _NetemPool:
        return _NetemPool(pool, self)

    def register(self, instance: str, operator: str, host: str) -> None:
        """Declare the instance's queues and put its host in the view (not yet among the members)."""
        declare_queues(self.amqp_url, self.wiring, instance_edges(self.wiring, operator, instance))
        self.instances[instance] = operator
        self.hosts[instance] = host
        self._write()

    def sync(self, instances: Sequence[InstanceView]) -> None:
        """The serving instances as of now (the executor's views): rewritten when they changed."""
        self.members = serving_members(instances)
        self._write()

    def view(self) -> NetView:
        return network_view(self.model, self.members, [*self.hosts.values(), self.emulation.provider_host])

    def _write(self) -> None:
        raw = self.view().encode()
        if raw != self._written:
            self.redis.set(view_key(self.wiring.prefix), raw)
            self._written = raw

    def sender(self, inner: Any) -> EmulatedSender:
        """The data provider's transport: it sends from `provider_host`."""
        return EmulatedSender(inner, self.wiring, self.emulation.provider_host, self.redis, self.seed, PROVIDER)

    # -- queues ------------------------------------------------------------------------------
    def instance_wiring(self) -> Wiring:
        """The run's wiring with every instance's own queues (depths, purges, accounting, cleanup)."""
        return self.wiring.with_instances(self.instances)

    def depths(self, inner: Any) -> "_InstanceDepths":
        return _InstanceDepths(inner, self)

    def delete_queues(self) -> None:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
        try:
            wiring_mod.delete_queues(conn.channel(), self.instance_wiring().edges)
        finally:
            if conn.is_open:
                conn.close()

    # -- reports -----------------------------------------------------------------------------
    def read(self) -> Interval:
        """The senders' reports since the previous read."""
        interval = Interval()
        while True:
            response = self.redis.xread({stream_key(self.wiring.prefix): self._last_id}, count=1000)
            if not response or not response[0][1]:
                break
            batch = response[0][1]
            parse_entries(batch, interval)
            last = batch[-1][0]
            self._last_id = last.decode() if isinstance(last, bytes) else str(last)
            if len(batch) < 1000:
                break
        self.malformed += interval.malformed
        return interval

    def record(self, tables: Dict[str, Dict[str, list]], t: float) -> Interval:
        """Append the interval ending at t: one `host_traffic` row per host pair (items, mean delay
        drawn) and one `dropped` row per operator that lost items to unavailability."""
        interval = self.read()
        traffic = tables.setdefault("host_traffic", new_traffic_table())
        for (u, v), (items, delay_ms) in sorted(interval.hops.items()):
            if items:
                for key, value in (("t_s", t), ("source_host", u), ("target_host", v), ("items", int(items)),
                                   ("delay_ms", delay_ms / items)):
                    traffic[key].append(value)
        dropped = tables["dropped"]
        for operator, n in sorted(interval.lost.items()):
            for key, value in (("t_s", t), ("operator", operator), ("reason", UNAVAILABLE), ("items", n)):
                dropped[key].append(value)
        return interval

    def unavailable_totals(self) -> Dict[str, int]:
        """Items lost to unavailability per receiving operator, cumulative (final accounting)."""
        raw = self.redis.hgetall(unavailable_hash(self.wiring.prefix))
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def new_traffic_table() -> Dict[str, list]:
    return {k: [] for k in ("t_s", "source_host", "target_host", "items", "delay_ms")}


class _InstanceDepths:
    """A depth source reading the per-instance queues in place of the shared ones."""

    def __init__(self, inner: Any, network: LiveNetwork):
        self.inner = inner
        self.network = network

    def run_depths(self, wiring: Wiring) -> Any:
        return self.inner.run_depths(self.network.instance_wiring())

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
