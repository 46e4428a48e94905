"""Queue depths of a run from RabbitMQ: the management HTTP API (ready + unacknowledged, one request
for all of a run's queues) and, as an exact alternative, AMQP passive declares (ready only).

Which one the snapshot uses, and why: the **management API**. An operator's queue is ready +
unacknowledged (docs/papers/btu-provisioning.md#what-a-policy-sees), which only the management
API reports (a passive ``queue_declare`` returns ``message_count`` = ready messages only, so the
items held by instances under their prefetch, up to instances × prefetch, would be missing), it is
what the original system read (docs/papers/btu-provisioning.md#visp-runtime), and one HTTP request
covers every queue of the run.
The price is staleness: the broker refreshes these statistics every ``collect_statistics_interval``
(5 s by default), so a depth can be up to ~5 s old, and a queue declared less than one refresh ago
may be listed without message counts (read as 0). Against a 15 s monitoring and 60 s reasoning
interval that lag is small; it does mean a depth read right after a burst may not show the burst
yet. ``PassiveDepthReader`` gives exact ready counts at the instant of the call where that matters
(tests, the final accounting of a run once every consumer has stopped, when unacked is 0).

The same listing also gives ``message_stats.publish``, the messages routed into each queue since it
was declared: the broker's own count of an operator's inflow (``RunDepths.inflow``), for checking a
run's accounting without trusting the instances' counters. It is as stale as the depths: read it
one refresh interval after the last publish.
"""
from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from operators.wiring import Wiring

COLUMNS = "name,messages,messages_ready,messages_unacknowledged,message_stats.publish"
PAGE_SIZE = 500  # the API's maximum page; a run has 2 queues per edge (26 for the OEE topology)


class ManagementError(RuntimeError):
    """The management API could not be used; the message names the URL and what went wrong."""


@dataclass(frozen=True)
class QueueStats:
    name: str
    ready: int
    unacked: int
    published: Optional[int] = None  # messages routed into the queue since it was declared (None: unknown)

    @property
    def depth(self) -> int:
        return self.ready + self.unacked


@dataclass(frozen=True)
class RunDepths:
    """Depths of one run's queues folded onto its operators (an operator's queue depth is the sum
    over its input edges)."""

    depths: Dict[str, int]  # per operator: ready + unacked of its input queues
    dead_letters: Dict[str, int]  # per operator: messages in its input edges' dead-letter queues
    missing: Tuple[str, ...]  # queues of the wiring the broker did not list (not declared yet / deleted)
    # per operator: items ever published into its input queues / topics, counted by the broker
    # itself (independent of the instances' own counters); None where the source cannot tell
    inflow: Optional[Dict[str, int]] = None


def credentials_from_amqp_url(amqp_url: str) -> Tuple[str, str, str]:
    """(user, password, vhost) of an AMQP URL; RabbitMQ's defaults (guest, guest, /) where absent."""
    parts = urllib.parse.urlsplit(amqp_url)
    user = urllib.parse.unquote(parts.username) if parts.username is not None else "guest"
    password = urllib.parse.unquote(parts.password) if parts.password is not None else "guest"
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    vhost = urllib.parse.unquote(path) if path else "/"
    return user, password, vhost


def redact(url: str) -> str:
    """A URL with its password replaced, for error messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _count(item: Mapping[str, Any], key: str) -> int:
    value = item.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def parse_queue_stats(payload: Any) -> Dict[str, QueueStats]:
    """Queue stats from the body of ``GET /api/queues/<vhost>`` (a list, or a page with ``items``).

    A queue whose statistics have not been emitted yet (declared less than one refresh ago) comes
    without counts: it reads as empty. When only ``messages`` is present it is taken as ready.
    """
    items = payload.get("items") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise ValueError(f"expected a list of queues, got {type(items).__name__}")
    out: Dict[str, QueueStats] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if "messages_ready" in item or "messages_unacknowledged" in item:
            ready, unacked = _count(item, "messages_ready"), _count(item, "messages_unacknowledged")
        else:
            ready, unacked = _count(item, "messages"), 0
        stats = item.get("message_stats")
        published = _count(stats, "publish") if isinstance(stats, dict) else 0  # absent before a first publish
        out[item["name"]] = QueueStats(item["name"], ready, unacked, published)
    return out


def fold_depths(wiring: Wiring, stats: Mapping[str, QueueStats]) -> RunDepths:
    depths = {o: 0 for o in wiring.operators}
    dead = {o: 0 for o in wiring.operators}
    inflow: Optional[Dict[str, int]] = {o: 0 for o in wiring.operators}
    missing = []
    for e in wiring.edges:
        q = stats.get(e.queue)
        if q is None:
            missing.append(e.queue)
        else:
            depths[e.consumer] += q.depth
            if inflow is not None:
                if q.published is None:
                    inflow = None
                else:
                    inflow[e.consumer] += q.published
        d = stats.get(e.dead_letter_queue)
        if d is None:
            missing.append(e.dead_letter_queue)
        else:
            dead[e.consumer] += d.depth
    return RunDepths(depths, dead, tuple(missing), inflow)


class ManagementClient:
    """A small client of the RabbitMQ management API (stdlib HTTP; credentials from the AMQP URL)."""

    def __init__(self, management_url: str, amqp_url: str, timeout_s: float = 5.0):
        self.base = management_url.rstrip("/")
        user, password, self.vhost = credentials_from_amqp_url(amqp_url)
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self._headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}
        self._user = user
        self.timeout_s = timeout_s

    def _get(self, path: str, query: Mapping[str, str]) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise ManagementError(f"RabbitMQ management API at {url}: HTTP {exc.code}, user {self._user!r} "
                                      "refused (credentials come from amqp_url; the user needs the "
                                      "'monitoring' or 'management' tag)") from exc
            if exc.code == 404:
                raise ManagementError(f"RabbitMQ management API at {url}: HTTP 404 (unknown vhost "
                                      f"{self.vhost!r}, or not a management API)") from exc
            raise ManagementError(f"RabbitMQ management API at {url}: HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ManagementError(f"RabbitMQ management API at {url} unreachable: {reason} "
                                  "(is the rabbitmq_management plugin enabled?)") from exc
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ManagementError(f"RabbitMQ management API at {url}: not JSON: {body[:200]!r}") from exc

    def queue_stats(self, prefix: str) -> Dict[str, QueueStats]:
        """Every queue of the vhost whose name starts with ``<prefix>.``, in one request."""
        query = {
            "columns": COLUMNS, "page": "1", "page_size": str(PAGE_SIZE), "pagination": "true",
            "name": f"^{re.escape(prefix)}\\.", "use_regex": "true",
        }
        payload = self._get(f"/api/queues/{urllib.parse.quote(self.vhost, safe='')}", query)
        try:
            stats = parse_queue_stats(payload)
        except ValueError as exc:
            raise ManagementError(f"RabbitMQ management API at {self.base}: unexpected queue listing: {exc}") from exc
        if isinstance(payload, dict) and int(payload.get("page_count", 1) or 1) > 1:
            raise ManagementError(f"RabbitMQ management API at {self.base}: more than {PAGE_SIZE} queues "
                                  f"match prefix {prefix!r}; a run has far fewer: is the prefix unique?")
        return stats

    def run_depths(self, wiring: Wiring) -> RunDepths:
        return fold_depths(wiring, self.queue_stats(wiring.prefix))

    def names(self, kind: str, prefix: str) -> List[str]:
        """Names of the vhost's queues or exchanges (`kind`) that start with `prefix` (e.g. what a run
        left behind); unlike the statistics, the listing itself is current."""
        if kind not in ("queues", "exchanges"):
            raise ValueError(f"kind must be 'queues' or 'exchanges', not {kind!r}")
        query = {"columns": "name", "name": f"^{re.escape(prefix)}", "use_regex": "true", "pagination": "true",
                 "page": "1", "page_size": str(PAGE_SIZE)}
        payload = self._get(f"/api/{kind}/{urllib.parse.quote(self.vhost, safe='')}", query)
        items = payload.get("items", []) if isinstance(payload, dict) else payload
        return sorted(str(item["name"]) for item in items)


class PassiveDepthReader:
    """Exact ready counts by AMQP passive declares (one round trip per queue, one connection kept).

    ``message_count`` excludes unacknowledged messages, so these depths are ready-only; a queue
    that does not exist is reported missing (the broker closes the channel, which is reopened).
    """

    def __init__(self, amqp_url: str):
        self.amqp_url = amqp_url
        self._connection: Optional[Any] = None
        self._channel: Optional[Any] = None

    def _open_channel(self) -> Any:
        import pika

        if self._connection is None or self._connection.is_closed:
            try:
                self._connection = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
            except pika.exceptions.AMQPError as exc:
                raise ManagementError(f"RabbitMQ at {redact(self.amqp_url)} unreachable: {exc!r}") from exc
            self._channel = None
        if self._channel is None or self._channel.is_closed:
            self._channel = self._connection.channel()
        return self._channel

    def ready(self, queue: str) -> Optional[int]:
        import pika.exceptions

        channel = self._open_channel()
        try:
            return int(channel.queue_declare(queue=queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return None
            raise ManagementError(f"passive declare of {queue!r} at {redact(self.amqp_url)}: {exc!r}") from exc

    def run_depths(self, wiring: Wiring) -> RunDepths:
        stats: Dict[str, QueueStats] = {}
        for e in wiring.edges:
            for name in (e.queue, e.dead_letter_queue):
                n = self.ready(name)
                if n is not None:
                    stats[name] = QueueStats(name, n, 0)
        return fold_depths(wiring, stats)

    def close(self) -> None:
        if self._connection is not None and self._connection.is_open:
            self._connection.close()
        self._connection = self._channel = None
