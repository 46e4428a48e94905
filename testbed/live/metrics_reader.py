"""Incremental reader of the metrics the operator instances write to Redis (operators/api.py):
stream ``<prefix>:metrics`` with ``sample`` entries (one sampled item's duration) and ``count``
entries (items processed / dead-lettered / dropped by the item timeout, emissions confirmed and busy
ms of one instance since its previous ``count`` entry), and the cumulative hashes
``<prefix>:processed``, ``<prefix>:dead`` and ``<prefix>:timeout``.
A read sums the counts per operator and per instance; ``edge_counts`` turns an operator's emissions
into per-edge counts, ``utilisation`` an instance's busy ms into a share of its worker slots.

Each ``read()`` continues after the last stream id it saw, in XREAD calls of at most ``count``
entries until the stream is drained, so a monitoring interval costs one round trip per ``count``
entries. A malformed entry (missing field, unknown kind, a value that is not a finite number) is
counted and skipped: one bad writer must not stop the monitor. ``count`` entries without
``emitted`` / ``busy_ms`` (written before those fields existed) count them as 0; an instance whose
entries lack ``cpu_ms`` / ``run_delay_ms`` / ``container_cpu_ms`` (an older image; no cgroup counter
or scheduler statistics in the container)
has those as None, not 0: unknown, not idle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from operators.api import dead_hash, emitted_hash, metrics_stream, processed_hash, timeout_hash

START_ID = "0-0"  # read a run's stream from its beginning (entries written before the monitor started)


@dataclass(frozen=True)
class Sample:
    """One sampled item's measured duration, as a row of the `samples` table."""

    t_s: float  # when processing completed, seconds since the run's start
    operator: str
    instance: str
    duration_ms: float
    latency_ms: Optional[float] = None  # end to end: from the source's emission of its origin


@dataclass
class InstanceActivity:
    """One instance's ``count`` entries of one read, summed."""

    operator: str
    processed: int = 0
    dead: int = 0
    emitted: int = 0  # emissions confirmed by the broker
    busy_ms: int = 0  # summed over the instance's worker slots (see ``utilisation``)
    timeout: int = 0  # inputs dropped unprocessed by the item timeout
    cpu_ms: Optional[int] = None  # CPU time of the worker slots' work (None: not reported)
    run_delay_ms: Optional[int] = None  # their wait for a CPU in busy periods (None: not reported)
    container_cpu_ms: Optional[int] = None  # the container's whole CPU (None: not reported)

    def add(self, counts: Mapping[str, Optional[int]]) -> None:
        """Add one ``count`` entry; an optional field stays None until an entry reports it."""
        for key, n in counts.items():
            if n is not None:
                setattr(self, key, (getattr(self, key) or 0) + n)


@dataclass(frozen=True)
class MetricsBatch:
    """What the stream held since the previous read."""

    samples: Tuple[Sample, ...]
    processed: Dict[str, int]  # per operator, summed over the `count` entries of this batch
    dead: Dict[str, int]
    entries: int  # stream entries read, malformed ones included
    malformed: int
    last_id: str
    emitted: Dict[str, int] = field(default_factory=dict)  # per operator (per edge: ``edge_counts``)
    instances: Dict[str, InstanceActivity] = field(default_factory=dict)  # per instance id
    timed_out: Dict[str, int] = field(default_factory=dict)  # per operator: dropped by the item timeout


def _text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _number(fields: Mapping[str, str], key: str) -> Optional[float]:
    raw = fields.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _count(fields: Mapping[str, str], key: str) -> Optional[int]:
    value = _number(fields, key)
    if value is None or value < 0 or value != int(value):
        return None
    return int(value)


COUNT_FIELDS = ("processed", "dead")
LATER_COUNT_FIELDS = ("emitted", "busy_ms", "timeout")  # absent in entries of older writers: 0
# absent in older writers' entries or where unreadable: None
CPU_FIELDS = ("cpu_ms", "run_delay_ms", "container_cpu_ms")


def _counts(fields: Mapping[str, str]) -> Optional[Dict[str, Optional[int]]]:
    """A ``count`` entry's counters, None if one is malformed."""
    out: Dict[str, Optional[int]] = {}
    for key in COUNT_FIELDS + LATER_COUNT_FIELDS + CPU_FIELDS:
        if key not in fields and key not in COUNT_FIELDS:
            out[key] = None if key in CPU_FIELDS else 0
            continue
        value = _count(fields, key)
        if value is None:
            return None
        out[key] = value
    return out


def _add(table: Optional[Dict[str, int]], key: str, n: int) -> None:
    if table is not None:
        table[key] = table.get(key, 0) + n


def parse_entries(entries: Iterable[Tuple[Any, Mapping[Any, Any]]], run_start_s: float,
                  processed: Dict[str, int], dead: Dict[str, int], samples: List[Sample],
                  emitted: Optional[Dict[str, int]] = None,
                  instances: Optional[Dict[str, InstanceActivity]] = None,
                  timed_out: Optional[Dict[str, int]] = None) -> int:
    """Parse stream entries ``(id, fields)`` (bytes or str), appending samples and adding counts
    per operator (and, if given, emissions per operator and activity per instance) in place;
    returns how many entries were malformed."""
    bad = 0
    for _, raw in entries:
        fields: Dict[str, str] = {}
        for k, v in raw.items():
            key, value = _text(k), _text(v)
            if key is not None and value is not None:
                fields[key] = value
        operator, instance, kind = fields.get("operator"), fields.get("instance"), fields.get("kind")
        t_ms = _number(fields, "t_ms")
        if not operator or instance is None or t_ms is None:
            bad += 1
            continue
        if kind == "sample":
            d = _number(fields, "duration_ms")
            latency = _number(fields, "latency_ms")
            if d is None or ("latency_ms" in fields and latency is None):
                bad += 1
                continue
            # subtract in ms first: epoch seconds as a float keep only ~0.2 us, which shows in t_s
            samples.append(Sample((t_ms - run_start_s * 1000.0) / 1000.0, operator, instance, d, latency))
        elif kind == "count":
            counts = _counts(fields)
            if counts is None:
                bad += 1
                continue
            _add(processed, operator, counts["processed"] or 0)
            _add(dead, operator, counts["dead"] or 0)
            _add(emitted, operator, counts["emitted"] or 0)
            if counts["timeout"]:
                _add(timed_out, operator, counts["timeout"])
            if instances is not None:
                instances.setdefault(instance, InstanceActivity(operator)).add(counts)
        else:
            bad += 1
    return bad


def edge_counts(emitted: Mapping[str, int], downstream: Mapping[str, Sequence[str]]) -> Dict[Tuple[str, str], int]:
    """Items sent along each edge ``(producer, consumer)`` of ``downstream`` (the topology's
    downstream lists): an operator publishes each emission once to its own fanout exchange (Kafka:
    topic), which puts it in every downstream operator's queue (consumer group), so each of its
    edges carries its ``emitted`` count (0 when it wrote none). Sources' items are the provider's."""
    return {(producer, consumer): emitted.get(producer, 0)
            for producer, consumers in downstream.items() for consumer in consumers}


def utilisation(busy_ms: float, interval_s: float, parallel: int = 1) -> Optional[float]:
    """Share of an instance's ``parallel`` worker slots busy over an interval (None if empty)."""
    if interval_s <= 0 or parallel < 1:
        return None
    return busy_ms / (interval_s * 1000.0 * parallel)


def _decode_hash(raw: Mapping[Any, Any]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for k, v in raw.items():
        key, value = _text(k), _text(v)
        if key is not None and value is not None and value.lstrip("-").isdigit():
            out[key] = int(value)
    return out


@dataclass
class MetricsReader:
    """Reads one run's metrics from ``redis`` (a redis.Redis client; bytes or decoded responses)."""

    redis: Any
    prefix: str
    run_start_s: float  # epoch seconds of the run's start: sample times become run-relative
    count: int = 1000  # entries per XREAD call
    max_entries: int = 500_000  # per read(): bounds one call even if writers outpace the reader
    last_id: str = START_ID
    malformed_total: int = field(default=0, init=False)

    @property
    def stream(self) -> str:
        return metrics_stream(self.prefix)

    def read(self) -> MetricsBatch:
        samples: List[Sample] = []
        processed: Dict[str, int] = {}
        dead: Dict[str, int] = {}
        emitted: Dict[str, int] = {}
        instances: Dict[str, InstanceActivity] = {}
        timed_out: Dict[str, int] = {}
        entries = bad = 0
        # last_id moves only once the whole read succeeded: if Redis fails mid-read, the next read
        # returns these entries again instead of losing the part already parsed
        position = self.last_id
        while entries < self.max_entries:
            response = self.redis.xread({self.stream: position}, count=self.count)
            if not response:
                break
            batch: Sequence[Tuple[Any, Mapping[Any, Any]]] = response[0][1]
            if not batch:
                break
            bad += parse_entries(batch, self.run_start_s, processed, dead, samples, emitted, instances, timed_out)
            entries += len(batch)
            position = _text(batch[-1][0]) or position
            if len(batch) < self.count:
                break
        self.last_id = position
        self.malformed_total += bad
        return MetricsBatch(tuple(samples), processed, dead, entries, bad, self.last_id, emitted, instances,
                            timed_out)

    def totals(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        """Cumulative (processed, dead) per operator from the hashes, for a run's final accounting."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(processed_hash(self.prefix))
        pipe.hgetall(dead_hash(self.prefix))
        processed, dead = pipe.execute()
        return _decode_hash(processed), _decode_hash(dead)

    def timed_out_totals(self) -> Dict[str, int]:
        """Cumulative inputs dropped by the item timeout per operator, for the final accounting."""
        return _decode_hash(self.redis.hgetall(timeout_hash(self.prefix)))

    def emitted_totals(self) -> Dict[str, int]:
        """Cumulative emissions per operator (confirmed by the broker), for the final accounting."""
        return _decode_hash(self.redis.hgetall(emitted_hash(self.prefix)))
