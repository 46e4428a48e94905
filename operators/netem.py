"""The emulated network on the live data path (``backend.emulation`` with the live backend;
docs/papers/odp.md#the-emulated-network-live).

With one central broker, a shared queue hides which instance, hence which host, receives an item.
So every instance has its own queues (``operators.wiring.instance_edges``) and the **sender** picks
the receiving instance itself: plain round robin over the receiving operator's serving instances,
each sender on its own (as the simulator does, testbed/sim/emulated.py). For a hop between two
hosts u != v it draws d(u, v) ~ N(mu_uv, sigma_uv) truncated at 0 (redrawn below 0) and publishes
after that delay from a timer thread, so its own processing never waits; in ``tuple`` mode the hop
loses the item with probability 1 - A_uv (decided here, the sender being the one that knows both
hosts). The **receiver** loses an item it takes with probability 1 - A_u of its own host (the
runner). Both losses count as ``unavailable``: cumulatively in the hash ``<prefix>:unavailable``
(field: the receiving operator) and per interval in the stream ``<prefix>:netem``, which also
carries the delays drawn per host pair (``hop`` entries) for the ``host_traffic`` table.

A loss is counted in the hash at once, together with the receiver's finished id of the item
(``COUNT_ONCE_LUA``), before the input it came from can be acknowledged: a sender killed right
after it would otherwise take the count with it, and an input processed again (redelivered) would
count its loss twice or lose a copy it delivered the first time. A loss Redis cannot count is not
made: the copy is delivered instead (nothing goes uncounted).

What a sender knows of the network comes from the live runtime through one Redis string,
``<prefix>:netem:view`` (``NetView``: serving instances per operator with their hosts, A_u per
host, mu, sigma and A_uv per ordered host pair), re-read every ``refresh_s``. The means and
deviations are the runtime's (testbed/emulation.py), so ODP, the simulator and the live senders see
one network. Draws are seeded per sender (``random.Random`` of ``<seed>/<sender>``).
"""
from __future__ import annotations

import heapq
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from operators.api import seen_key
from operators.transports import StartCancelled
from operators.wiring import Edge, Wiring, instance_queue

log = logging.getLogger(__name__)

UNAVAILABLE = "unavailable"  # the `dropped` reason of both losses
DEDUP_TTL_S = 3600  # how long a lost item's finished id is kept (the runners' DEDUP_TTL_S default)
# KEYS: the receiver's finished-id key of a dropped input (none without deduplication); ARGV: TTL,
# the counting hash, the receiving operator. Marks the input finished unless it is already, and
# counts it only then (a copy that comes again is recognised, its drop counted once).
COUNT_ONCE_LUA = """
if #KEYS > 0 and not redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[1])) then return 0 end
redis.call('HINCRBY', ARGV[2], ARGV[3], 1)
return 1
"""


def view_key(prefix: str) -> str:
    return f"{prefix}:netem:view"


def stream_key(prefix: str) -> str:
    return f"{prefix}:netem"


def unavailable_hash(prefix: str) -> str:
    return f"{prefix}:unavailable"


class NetemError(ValueError):
    """A view that cannot be used (malformed, or a pair without a link)."""


@dataclass(frozen=True)
class Link:
    mean_ms: float
    sd_ms: float
    availability: float = 1.0


SAME_HOST = Link(0.0, 0.0, 1.0)  # self-loops are perfect (spec: d = 0, A = 1)


@dataclass(frozen=True)
class NetView:
    """The network as the runtime tells the senders."""

    members: Mapping[str, Tuple[Tuple[str, str], ...]]  # operator -> ((instance, host), ...), by instance id
    hosts: Mapping[str, float]  # host -> A_u
    links: Mapping[Tuple[str, str], Link]  # (u, v), u != v

    def link(self, u: str, v: str) -> Link:
        if u == v:
            return SAME_HOST
        found = self.links.get((u, v))
        if found is None:
            raise NetemError(f"no link {u} -> {v} in the view (hosts: {sorted(self.hosts)})")
        return found

    def host_of(self, instance: str) -> Optional[str]:
        for members in self.members.values():
            for i, h in members:
                if i == instance:
                    return h
        return None

    def encode(self) -> str:
        return json.dumps({
            "members": {o: [list(m) for m in ms] for o, ms in sorted(self.members.items())},
            "hosts": dict(sorted(self.hosts.items())),
            "links": [[u, v, k.mean_ms, k.sd_ms, k.availability] for (u, v), k in sorted(self.links.items())],
        }, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: Any) -> "NetView":
        try:
            obj = json.loads(raw)
            members = {str(o): tuple(sorted((str(i), str(h)) for i, h in ms)) for o, ms in obj["members"].items()}
            hosts = {str(h): float(a) for h, a in obj["hosts"].items()}
            links = {(str(u), str(v)): Link(float(m), float(s), float(a)) for u, v, m, s, a in obj["links"]}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise NetemError(f"malformed network view: {exc!r}") from exc
        return cls(members, hosts, links)


# ---- the pure decisions ----------------------------------------------------------------------

def draw_delay_ms(mean_ms: float, sd_ms: float, normal: Callable[[], float]) -> float:
    """One draw of N(mean, sd) truncated at 0: a draw below 0 is redrawn (as testbed/emulation.py)."""
    d = mean_ms + sd_ms * normal()
    while d < 0:
        d = mean_ms + sd_ms * normal()
    return d


def lost(availability: float, uniform: Callable[[], float]) -> bool:
    """Lost with probability 1 - availability (no draw at full availability)."""
    return availability < 1.0 and uniform() >= availability


class RoundRobin:
    """Each sender goes round each receiving operator's members in turn (sorted by instance id)."""

    def __init__(self) -> None:
        self._turns: Dict[str, int] = {}

    def choose(self, operator: str, members: Sequence[Tuple[str, str]]) -> Tuple[str, str]:
        turn = self._turns.get(operator, 0)
        self._turns[operator] = turn + 1
        return members[turn % len(members)]


class Draws:
    """A sender's seeded draws: standard normals for delays, uniforms for losses (one stream each,
    so a loss decision never shifts the delays)."""

    def __init__(self, seed: int, name: str):
        self._delay = random.Random(f"{seed}/{name}/delay")
        self._loss = random.Random(f"{seed}/{name}/loss")
        self._lock = threading.Lock()

    def normal(self) -> float:
        with self._lock:
            return self._delay.normalvariate(0.0, 1.0)

    def uniform(self) -> float:
        with self._lock:
            return self._loss.random()


# ---- counters: the `host_traffic` table and the `unavailable` drops --------------------------

class NetCounters:
    """Hops between hosts (items, delay drawn in ms summed) and losses per receiving operator since
    the last flush; ``flush`` writes them as ``hop`` and ``lost`` entries of the run's stream (and
    the link losses also into the cumulative hash; the runner counts its host losses there itself,
    with the input's finished id). A failed write keeps them for the next flush."""

    def __init__(self, prefix: str, sender: str, clock: Callable[[], float] = time.time):
        self.prefix = prefix
        self.sender = sender
        self.clock = clock
        self._lock = threading.Lock()
        self._hops: Dict[Tuple[str, str], List[float]] = {}
        self._lost: Dict[str, int] = {}
        self._lost_uncounted: Dict[str, int] = {}  # link losses: not in the hash yet
        self.hops_total = 0
        self.lost_total = 0

    def hop(self, u: str, v: str, delay_ms: float) -> None:
        with self._lock:
            counts = self._hops.setdefault((u, v), [0.0, 0.0])
            counts[0] += 1
            counts[1] += delay_ms
            self.hops_total += 1

    def lost(self, operator: str, counted: bool) -> None:
        """One item lost before ``operator`` received it; ``counted``: already in the hash."""
        with self._lock:
            self._lost[operator] = self._lost.get(operator, 0) + 1
            if not counted:
                self._lost_uncounted[operator] = self._lost_uncounted.get(operator, 0) + 1
            self.lost_total += 1

    def flush(self, redis: Any) -> bool:
        with self._lock:
            hops, lost, uncounted = self._hops, self._lost, self._lost_uncounted
            self._hops, self._lost, self._lost_uncounted = {}, {}, {}
        if not hops and not lost:
            return True
        t_ms = int(self.clock() * 1000)
        try:
            pipe = redis.pipeline(transaction=True)
            for (u, v), (items, delay) in sorted(hops.items()):
                pipe.xadd(stream_key(self.prefix), {"kind": "hop", "sender": self.sender, "t_ms": t_ms, "u": u, "v": v,
                                                    "items": int(items), "delay_ms": delay})
            for operator, n in sorted(lost.items()):
                pipe.xadd(stream_key(self.prefix), {"kind": "lost", "sender": self.sender, "t_ms": t_ms,
                                                    "operator": operator, "items": n})
            for operator, n in sorted(uncounted.items()):
                pipe.hincrby(unavailable_hash(self.prefix), operator, n)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - Redis away: keep them for the next flush
            log.warning("network counters not written (kept for the next flush): %r", exc)
            with self._lock:
                for key, (items, delay) in hops.items():
                    counts = self._hops.setdefault(key, [0.0, 0.0])
                    counts[0] += items
                    counts[1] += delay
                for table, old in ((self._lost, lost), (self._lost_uncounted, uncounted)):
                    for operator, n in old.items():
                        table[operator] = table.get(operator, 0) + n
            return False
        return True


@dataclass
class Interval:
    """What the stream held since the last read: hops per (u, v) as [items, delay ms summed], and
    items lost per receiving operator."""

    hops: Dict[Tuple[str, str], List[float]] = field(default_factory=dict)
    lost: Dict[str, int] = field(default_factory=dict)
    malformed: int = 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def parse_entries(entries: Iterable[Tuple[Any, Mapping[Any, Any]]], into: Interval) -> Interval:
    for _, raw in entries:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        try:
            if fields["kind"] == "hop":
                counts = into.hops.setdefault((fields["u"], fields["v"]), [0.0, 0.0])
                counts[0] += int(fields["items"])
                counts[1] += float(fields["delay_ms"])
            elif fields["kind"] == "lost":
                into.lost[fields["operator"]] = into.lost.get(fields["operator"], 0) + int(fields["items"])
            else:
                into.malformed += 1
        except (KeyError, ValueError):
            into.malformed += 1
    return into


# ---- the sender ------------------------------------------------------------------------------

@dataclass(eq=False)
class _Group:
    """One message handed to the sender: its copies (one per output edge) still unconfirmed."""

    message: Any  # the caller's OutMessage
    remaining: int


@dataclass(frozen=True)
class _Loss:
    """A copy its link lost, not yet counted (its group waits for the count)."""

    group: _Group
    edge: Edge
    instance: str
    host: str
    link: Link


class EmulatedSender:
    """A transport (operators.transports.Transport) in front of a RabbitPublisher: each message of
    a producer goes to one instance of every downstream operator (its own queue), after the delay
    drawn for the hop; the caller's ``on_confirm`` gets a message once all its copies are confirmed
    (or lost on the way). Messages that already name a destination pass through unchanged."""

    def __init__(self, inner: Any, wiring: Wiring, host: str, redis: Any, seed: int, name: str,
                 refresh_s: float = 0.5, flush_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 dedup_ttl_s: int = DEDUP_TTL_S):
        self.inner = inner
        self.wiring = wiring
        self.host = host
        self.redis = redis
        self.name = name
        self.refresh_s = refresh_s
        self.flush_s = flush_s
        self.clock = clock
        self.dedup_ttl_s = dedup_ttl_s  # 0: no finished ids (as the runners' DEDUP_TTL_S)
        self._count_script: Any = None  # COUNT_ONCE_LUA, registered on first use
        self.on_confirm: Optional[Callable[[Sequence[Any]], None]] = None
        self.draws = Draws(seed, name)
        self.counters = NetCounters(wiring.prefix, name)
        self.view: Optional[NetView] = None
        self._raw_view: Any = None
        self._rr = RoundRobin()
        self._cond = threading.Condition()
        self._timers: List[Tuple[float, int, Any]] = []  # (due, seq, copy): a heap
        self._seq = 0
        self._parked: List[Tuple[_Group, Edge]] = []  # no serving instance of the receiver yet
        self._open = 0  # groups not finished
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []

    @property
    def stats(self) -> Any:
        return self.inner.stats

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout_s: Optional[float] = 30.0, cancel: Optional[threading.Event] = None) -> None:
        """Read the view, then start the publisher: within ``timeout_s``, or (None) until both are
        there or ``cancel`` is set (the runtime ends a run whose Redis lost the view)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._refresh():
            if cancel is not None and cancel.is_set():
                raise StartCancelled(f"stopped while waiting for the network view at {view_key(self.wiring.prefix)}")
            if deadline is not None and time.monotonic() >= deadline:
                raise NetemError(f"no network view at {view_key(self.wiring.prefix)} within {timeout_s:.0f} s "
                                 "(the live runtime writes it when it places an instance)")
            time.sleep(0.2)
        self.inner.on_confirm = self._confirmed
        self.inner.start(timeout_s, cancel)
        for target, label in ((self._timer_loop, "netem-timer"), (self._refresh_loop, "netem-view")):
            t = threading.Thread(target=target, name=label, daemon=True)
            t.start()
            self._threads.append(t)

    def flush(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._open > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return self.inner.flush(max(0.0, deadline - time.monotonic()))

    def close(self, timeout_s: float = 30.0) -> None:
        if not self.flush(timeout_s):
            with self._cond:
                log.warning("%s: closing with %d message(s) not delivered (%d waiting for a receiver)",
                            self.name, self._open, len(self._parked))
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout_s)
        self.inner.close(timeout_s)
        self.counters.flush(self.redis)

    def outstanding(self) -> int:
        with self._cond:
            return self._open

    # -- the receiver's side ------------------------------------------------------------------
    def host_lost(self) -> bool:
        """An item taken on this sender's host (a runner's own) is lost: probability 1 - A_u."""
        view = self.view
        return view is not None and lost(view.hosts.get(self.host, 1.0), self.draws.uniform)

    # -- sending -----------------------------------------------------------------------------
    def publish_batch(self, messages: Sequence[Any]) -> None:
        now = self.clock()
        direct: List[Any] = []
        losses: List[_Loss] = []
        finished: List[Any] = []
        with self._cond:
            for m in messages:
                if m.destination is not None:
                    direct.append(m)
                    continue
                edges = self.wiring.outputs(m.producer)
                group = _Group(m, len(edges))
                self._open += 1
                for e in edges:
                    self._route(group, e, now, direct, losses)
                if not edges:  # nothing downstream: done at once
                    finished.append(self._finish(group))
            if self._timers:
                self._cond.notify_all()
        if direct:
            self.inner.publish_batch(direct)
        self._report(finished + self._settle_losses(losses))

    def _route(self, group: _Group, edge: Edge, now: float, direct: List[Any], losses: List[_Loss]) -> None:
        """Under the lock: pick the receiving instance, decide the hop's loss (counted by the caller,
        `_settle_losses`), draw its delay."""
        view = self.view
        members = view.members.get(edge.consumer) if view is not None else None
        if not members:
            self._parked.append((group, edge))
            return
        instance, host = self._rr.choose(edge.consumer, members)
        link = view.link(self.host, host)  # type: ignore[union-attr]
        if host != self.host and lost(link.availability, self.draws.uniform):
            losses.append(_Loss(group, edge, instance, host, link))
            return
        self._send(group, edge, instance, host, link, now, direct)

    def _send(self, group: _Group, edge: Edge, instance: str, host: str, link: Link, now: float,
              direct: List[Any]) -> None:
        """Under the lock: the copy for ``instance``, published now or after the hop's delay."""
        delay_ms = 0.0
        if host != self.host:
            delay_ms = draw_delay_ms(link.mean_ms, link.sd_ms, self.draws.normal)
            self.counters.hop(self.host, host, delay_ms)
        copy = replace(group.message, destination=instance_queue(edge, instance), ref=group)
        if delay_ms > 0:
            self._seq += 1
            heapq.heappush(self._timers, (now + delay_ms / 1000.0, self._seq, copy))
        else:
            direct.append(copy)

    def _settle_losses(self, losses: Sequence[_Loss]) -> List[Any]:
        """Count the copies links lost (each once per item and receiver, before its group can
        finish), then settle them; those Redis cannot count are delivered instead. Returns the
        caller's messages that are finished now."""
        if not losses:
            return []
        counted = self._count_losses(losses)
        now, finished = self.clock(), []
        direct: List[Any] = []  # the copies published now, in one batch
        with self._cond:
            for loss, new in zip(losses, counted, strict=True):
                if new is None:
                    self._send(loss.group, loss.edge, loss.instance, loss.host, loss.link, now, direct)
                    continue
                if new:
                    self.counters.lost(loss.edge.consumer, counted=True)
                loss.group.remaining -= 1
                if loss.group.remaining == 0:
                    finished.append(self._finish(loss.group))
            if self._timers:
                self._cond.notify_all()
        if direct:
            self.inner.publish_batch(direct)
        return finished

    def _count_losses(self, losses: Sequence[_Loss]) -> List[Optional[bool]]:
        """Per loss: True if counted now, False if its receiver had the item already (a copy
        that came again), None if Redis cannot count (for all of them: one round trip)."""
        try:
            if self._count_script is None:
                self._count_script = self.redis.register_script(COUNT_ONCE_LUA)
            pipe = self.redis.pipeline(transaction=False)
            for loss in losses:
                m = loss.group.message
                keys = ([seen_key(self.wiring.prefix, loss.edge.consumer, m.producer, m.item_id)]
                        if self.dedup_ttl_s else [])
                self._count_script(keys=keys, args=[self.dedup_ttl_s, unavailable_hash(self.wiring.prefix),
                                                    loss.edge.consumer], client=pipe)
            return [bool(int(n)) for n in pipe.execute()]
        except Exception as exc:  # noqa: BLE001 - uncounted they would be lost to the accounting
            log.warning("%s: %d link loss(es) not countable, delivered instead: %r", self.name, len(losses), exc)
            return [None] * len(losses)

    def _finish(self, group: _Group) -> Any:
        self._open -= 1
        self._cond.notify_all()
        return group.message

    def _report(self, finished: List[Any]) -> None:
        if finished and self.on_confirm is not None:
            self.on_confirm(finished)

    def _confirmed(self, copies: Sequence[Any]) -> None:
        finished, passed = [], []
        with self._cond:
            for c in copies:
                group = c.ref
                if not isinstance(group, _Group):
                    passed.append(c)  # sent with its own destination: the caller's own handle
                    continue
                group.remaining -= 1
                if group.remaining == 0:
                    finished.append(self._finish(group))
        self._report(passed + finished)

    def _timer_loop(self) -> None:
        """Publishes each delayed copy when its time comes (a heap of due times; one thread)."""
        while True:
            with self._cond:
                while not self._stop.is_set():
                    if self._timers:
                        wait = self._timers[0][0] - self.clock()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait(0.5)
                if self._stop.is_set() and not self._timers:
                    return
                now, due = self.clock(), []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers)[2])
                if self._stop.is_set():  # closing after a failed flush: send what is left now
                    due += [c for _, _, c in sorted(self._timers)]
                    self._timers.clear()
            if due:
                self.inner.publish_batch(due)

    def _refresh_loop(self) -> None:
        last_flush = time.monotonic()
        while not self._stop.wait(self.refresh_s):
            self._refresh()
            if time.monotonic() - last_flush >= self.flush_s:
                last_flush = time.monotonic()
                self.counters.flush(self.redis)

    def _refresh(self) -> bool:
        """Re-read the view; route what waited for a receiver. False while there is no view."""
        try:
            raw = self.redis.get(view_key(self.wiring.prefix))
        except Exception as exc:  # noqa: BLE001 - Redis away: keep the view we have
            log.warning("%s: network view not readable: %r", self.name, exc)
            return self.view is not None
        if raw is None:
            return self.view is not None
        if raw == self._raw_view:
            return True
        try:
            view = NetView.decode(raw)
        except NetemError as exc:
            log.error("%s: %s", self.name, exc)
            return self.view is not None
        direct: List[Any] = []
        losses: List[_Loss] = []
        with self._cond:
            self.view, self._raw_view = view, raw
            parked, self._parked = self._parked, []
            now = self.clock()
            for group, edge in parked:
                self._route(group, edge, now, direct, losses)
            self._cond.notify_all()
        if direct:
            self.inner.publish_batch(direct)
        self._report(self._settle_losses(losses))
        return True
