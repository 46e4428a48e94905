"""Keyed routing of the live job mode (docs/papers/daedalus.md#live-runtime), without I/O: which
worker queues a rescale binds and unbinds on the consistent-hash exchange, the key shares a probe
of the exchange measured, and the in-flight bound that gives the job Flink's backpressure.

RabbitMQ's consistent-hash exchange places every bound queue on a hash ring (as many points as its
binding weight) and sends an item to the queue that owns the hash of its routing key. Workers
0..n-1 own the bound queues 0..n-1; rescaling from n to n' binds n..n'-1 or unbinds n'..n-1, so the
ring changes only where queues come or go (the keys of the other queues stay where they were)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

from testbed.messages import one_line

T = TypeVar("T")

RING_WEIGHT = 20  # ring points per worker queue: with one point a queue's share varies far more


def inflight_limit(seconds: float, worker_rate: float, n: int) -> int:
    """The in-flight bound of n workers: `seconds` of their nominal rate (at least one item)."""
    return max(1, int(round(seconds * worker_rate * n)))


def rebinding(old_n: int, new_n: int) -> Tuple[List[int], List[int]]:
    """(workers whose queues are bound, workers whose queues are unbound) to go from n to n'."""
    if old_n < 0 or new_n < 0:
        raise ValueError(f"worker counts must be >= 0, got {old_n} -> {new_n}")
    return list(range(old_n, new_n)), list(range(new_n, old_n))


def worker_shares(owner: Mapping[str, int], weights: Mapping[str, float], n: int) -> List[float]:
    """s_w: the weight of the keys each of n workers owns (owner: key -> worker, from a probe)."""
    shares = [0.0] * n
    total = sum(weights.values())
    for key, w in owner.items():
        if not 0 <= w < n:
            raise ValueError(f"key {key!r} routed to worker {w}, outside 0..{n - 1}")
        shares[w] += weights[key] / total
    return shares


def capacity(worker_rate: float, shares: Sequence[float]) -> float:
    """The job's capacity with these shares: the hottest worker, at worker_rate, holds it back."""
    top = max(shares) if shares else 0.0
    return worker_rate / top if top > 0 else 0.0


@dataclass
class InflightGate:
    """Items forwarded to the workers' queues and not yet processed, bounded by `limit`. The router
    forwards only below it, so a hot worker's queue fills and then holds the source back, as Flink's
    network buffers do; the job's throughput is then the hottest worker's rate divided by its share.
    `base` counts what the queues held when the job (re)started (moved after a rescale)."""

    limit: int
    base: int = 0
    forwarded: int = 0
    processed_at_start: int = 0

    def restart(self, queued: int, processed_total: int, limit: Optional[int] = None) -> None:
        self.base, self.forwarded, self.processed_at_start = queued, 0, processed_total
        if limit is not None:
            self.limit = limit

    def in_flight(self, processed_total: int) -> int:
        return max(0, self.base + self.forwarded - (processed_total - self.processed_at_start))

    def room(self, processed_total: int) -> int:
        return max(0, self.limit - self.in_flight(processed_total))


def key_names(keys: int) -> List[str]:
    return [f"k{i}" for i in range(keys)]


def weights_by_key(weights: Sequence[float]) -> Dict[str, float]:
    return dict(zip(key_names(len(weights)), (float(w) for w in weights), strict=True))


# -- faults (docs/papers/daedalus.md#faults-during-a-live-job-run) ------------------------------------
def last_log_line(logs: str) -> str:
    """The last non-empty line of a container's log (what a worker said last), on one line."""
    lines = [ln for ln in logs.splitlines() if ln.strip()]
    return one_line(lines[-1]) if lines else ""


def redis_loss(t: float, run_id_before: str, run_id_now: str, state_present: bool,
               what: str = "keyed state, counts and checkpoints") -> Optional[str]:
    """Why the run's Redis state cannot be trusted any more, None while it can. A restarted Redis
    (another run_id) kept the run's keys only if it persists them, and even then maybe not the
    last writes; the testbed's Redis (infra/services.sh: --save '' --appendonly no) keeps nothing.
    `what`: the state the run keeps there, as the reason names it."""
    if run_id_now != run_id_before:
        if state_present:
            return (f"Redis lost the run's state at t={t:.0f} s: it restarted (the run's keys came back from its "
                    f"persistence, but not necessarily the last writes of its {what})")
        return (f"Redis lost the run's state at t={t:.0f} s: it restarted without the run's {what} "
                f"(the testbed's Redis keeps nothing on disk)")
    if not state_present:
        return f"Redis lost the run's state at t={t:.0f} s: the run's keys are gone (flushed or evicted)"
    return None


@dataclass
class Outage:
    """How long a service has been failing; `exceeded` once it failed for longer than `limit_s`."""

    limit_s: float
    since: Optional[float] = None

    def failed(self, t: float) -> bool:
        if self.since is None:
            self.since = t
        return self.exceeded(t)

    def exceeded(self, t: float) -> bool:
        return self.since is not None and t - self.since > self.limit_s

    def ok(self) -> None:
        self.since = None


def retry_until(fn: Callable[[], T], deadline_s: float, clock: Callable[[], float], sleep: Callable[[float], None],
                errors: Tuple[Type[BaseException], ...] = (Exception,), pause_s: float = 0.5) -> T:
    """fn() until it returns without one of `errors` or `deadline_s` (of `clock`) has passed; the last
    error is raised then. At least one attempt."""
    end = clock() + deadline_s
    while True:
        try:
            return fn()
        except errors:
            if clock() + pause_s > end:
                raise
            sleep(pause_s)


def parse_ids(raw: Union[str, bytes, None]) -> frozenset:
    """The item ids a worker's last checkpoint committed (hash ``lastcommit``: "3,17,42"; None: none)."""
    if not raw:
        return frozenset()
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return frozenset(int(i) for i in text.split(",") if i)


def committed_id(body: bytes) -> int:
    """An item body's id (-1 if it is not an item: never in a checkpoint)."""
    head = body.split(b",", 1)[0]
    return int(head) if head.isdigit() else -1
