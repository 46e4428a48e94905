"""The live runtime's side of the emulated network (`backend.emulation.enabled` with the live backend;
operators/netem.py has the senders' side, docs/papers/odp.md#the-emulated-network-live).

`LiveNetwork` keeps the network view the senders read (serving instances with their hosts, A_u, and
mu, sigma, A_uv per host pair, from testbed/emulation.py's `NetworkModel`, so ODP and the senders see
one network), gives every instance its own queues before its container starts (the executor's pool
is wrapped: `pool`), lets the data provider send from `backend.emulation.provider_host` (`sender`),
folds the per-instance queues into the depths the monitor and the final accounting read
(`depths`, `wiring`), and turns the senders' reports into `host_traffic` rows and `dropped` rows
with reason `unavailable` (`record`).

An instance that is gone (stopped by a scale-in or a migration, or crashed) may leave items in its
queues: those handed back while it drained, and copies a sender published before it saw the new
view. As in the simulator, they go to the operator's serving instances in turn, keeping their send
time (they are already in flight: no new delay, no new loss draw), `rehome` checks each gone
instance's queues for `REHOME_S` after it went (a sender's timers and view lag are well below that).
While the broker is away a sender holds what it sends (its publisher republishes it when the broker
is back, seconds later) and nothing can be moved, so the window runs again from the last attempt
that found the broker away (`rehome_due`).

Faults (docs/papers/odp.md#faults-during-an-emulated-network-run): a view write that fails is left
to the next `sync`, and so are the queues of an instance placed while the broker is away (the
instance joins the view once they are declared); a restarted Redis ends the run
(testbed/live/monitor.py, `RedisStateWatch`), since the senders' counts and the runners' finished
ids went with it.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from operators import wiring as wiring_mod
from operators.netem import (
    UNAVAILABLE,
    EmulatedSender,
    Interval,
    Link,
    NetView,
    parse_entries,
    stream_key,
    unavailable_hash,
    view_key,
)
from operators.transports import BrokerUnreachable, declare_queues
from operators.wiring import Wiring, instance_edges
from testbed.emulation import EmulationConfig, NetworkModel
from testbed.model import InstanceState, InstanceView

log = logging.getLogger(__name__)

PROVIDER = "provider"  # the data provider's name as a sender (its seeded draws)
REHOME_S = 30.0  # how long a gone instance's queues are checked for items to hand on


def rehome_due(since: float, broker_failed_at: Optional[float], now: float, window_s: float = REHOME_S) -> bool:
    """Whether the queues of an instance gone at `since` are still checked at `now`: for `window_s`
    after it went or after the broker was last found away, whichever is later (a sender holds what it
    sends while the broker is away and publishes it when the broker is back)."""
    start = since if broker_failed_at is None else max(since, broker_failed_at)
    return now - start <= window_s


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
        self.clock = time.monotonic
        self._gone: Dict[str, float] = {}  # instance -> when it was first seen gone
        self.rehomed: Dict[str, int] = {}  # per operator: items moved from gone instances' queues
        self.broker_failed_at: Optional[float] = None  # the last rehome that found the broker away
        self.view_failures = 0  # view writes that failed (Redis away); the next sync writes it
        self.undeclared: Dict[str, str] = {}  # instance -> operator: its queues not declared yet (broker away)
        self.waited: List[str] = []  # instances whose queues had to wait for the broker

    # -- instances and the view ------------------------------------------------------------
    def pool(self, pool: Any) -> _NetemPool:
        return _NetemPool(pool, self)

    def register(self, instance: str, operator: str, host: str) -> None:
        """Put the instance's host in the view and declare its queues; with the broker away the
        declaration is left to the next `sync` (the instance's container waits for the broker too),
        and the instance is no member of the view until its queues are there: a copy sent to a queue
        that does not exist would be dropped by the broker."""
        self.instances[instance] = operator
        self.hosts[instance] = host
        self.undeclared[instance] = operator
        self._declare_pending()
        self._write()

    def sync(self, instances: Sequence[InstanceView]) -> None:
        """The serving instances as of now (the executor's views), those whose queues are declared:
        rewritten when they changed; the items left in the queues of instances that are gone handed on."""
        self._declare_pending()
        self.members = serving_members([i for i in instances if i.id not in self.undeclared])
        self._write()
        present, now = {i.id for i in instances}, self.clock()
        for instance in self.instances:
            if instance not in present:
                self._gone.setdefault(instance, now)
        due = [i for i, since in self._gone.items() if rehome_due(since, self.broker_failed_at, now)]
        if due:
            try:
                self.rehome(due)
            except Exception as exc:  # noqa: BLE001 - the broker is away: the next sync tries again
                self.broker_failed_at = self.clock()
                log.warning("could not hand on the items of instances that went: %r", exc)

    def _declare_pending(self) -> None:
        """Declare the queues of registered instances that have none yet: one attempt each, in order,
        until the first that finds the broker away (a refused setup is a fault of the run: raised)."""
        for instance, operator in list(self.undeclared.items()):
            try:
                declare_queues(self.amqp_url, self.wiring, instance_edges(self.wiring, operator, instance), 0.0)
            except BrokerUnreachable as exc:
                self.broker_failed_at = self.clock()
                if instance not in self.waited:
                    self.waited.append(instance)
                    log.warning("queues of %s not declared, the broker is away (the next sync tries again): %s",
                                instance, exc)
                return
            del self.undeclared[instance]

    def rehome(self, gone: Sequence[str]) -> Dict[str, int]:
        """Move what the queues of ``gone`` instances hold to their operator's serving instances,
        in turn, each message published (confirmed) before it is acknowledged; an operator without a
        serving instance keeps them where they are for now. Returns the items moved per operator."""
        import pika

        moved: Dict[str, int] = {}
        conn = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
        try:
            channel = conn.channel()
            channel.confirm_delivery()
            turns: Dict[str, int] = {}
            for instance in gone:
                operator = self.instances[instance]
                members = [m for m, _host in self.members.get(operator, ())]
                if not members:
                    continue
                for edge in instance_edges(self.wiring, operator, instance):
                    while True:
                        method, props, body = channel.basic_get(edge.queue, auto_ack=False)
                        if method is None:
                            break
                        turn = turns.get(operator, 0)
                        turns[operator] = turn + 1
                        target = instance_edges(self.wiring, operator, members[turn % len(members)])
                        queue = next(e.queue for e in target if e.producer == edge.producer)
                        channel.basic_publish(exchange="", routing_key=queue, body=body, properties=props,
                                              mandatory=True)
                        channel.basic_ack(method.delivery_tag)
                        moved[operator] = moved.get(operator, 0) + 1
        finally:
            if conn.is_open:
                conn.close()
        for operator, n in moved.items():
            self.rehomed[operator] = self.rehomed.get(operator, 0) + n
            log.info("%d item(s) of %s handed on from the queues of instances that went", n, operator)
        return moved

    def view(self) -> NetView:
        return network_view(self.model, self.members, [*self.hosts.values(), self.emulation.provider_host])

    def _write(self) -> None:
        """Write the view if it changed; a failed write is left to the next call (senders keep the
        view they have meanwhile, and a Redis that restarted ends the run anyway)."""
        raw = self.view().encode()
        if raw == self._written:
            return
        from redis.exceptions import RedisError

        try:
            self.redis.set(view_key(self.wiring.prefix), raw)
        except (RedisError, OSError) as exc:
            self.view_failures += 1
            log.warning("network view not written (the next sync tries again): %r", exc)
            return
        self._written = raw

    def details(self) -> Dict[str, Any]:
        """The manifest's summary: items handed on from instances that went (per operator), the
        instances that went, and what faults cost the reports and the view writes."""
        return {"rehomed": dict(sorted(self.rehomed.items())), "gone": sorted(self._gone),
                "malformed_reports": self.malformed, "view_write_failures": self.view_failures,
                "declared_late": list(self.waited)}

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
