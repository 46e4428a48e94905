"""What ends a live job run (docs/papers/daedalus.md#faults-during-a-live-job-run), said in one line:
a Redis that restarted, lost the run's keys or stayed away; a lost RabbitMQ connection (the broker
is waited for, bounded, to say what it lost); a failed source, router or sampler. A worker exit
is looked at through these first: a broker or Redis failure explains it before the worker does."""
from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Tuple

from operators.keyed_job import entry_queue, redis_key
from testbed.live.job_flow import connect as amqp_connect
from testbed.live.job_routing import redis_loss, retry_until
from testbed.messages import one_line


class LiveJobError(RuntimeError):
    """The live job cannot go on (engine, broker, workers); says which."""


def redis_client(url: str) -> Any:
    """Runtime clients: a command fails within seconds while Redis is away (bounded retries)."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=3,
                                retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), 3))


def redis_id(client: Any) -> str:
    return str(client.info("server").get("run_id", ""))


class FaultWatch:
    """The run's fault reasons. `parts`: (the source or the router, who it is), whose `error` ends
    the run; `fault` and `sampler_error` are set by the sampler's thread; `connect` opens a broker
    connection (a fake broker's in unit tests)."""

    BROKER_WAIT_S = 30.0  # after a lost broker connection: how long to wait for the broker to say what it lost

    def __init__(self, amqp_url: str, redis: Any, prefix: str, now: Callable[[], float],
                 connect: Callable[[str], Any] = amqp_connect) -> None:
        self.amqp_url, self.redis, self.prefix, self.now, self.connect = amqp_url, redis, prefix, now, connect
        self.redis_run_id = ""
        self.state_written = False  # from then on the run's control key is always there
        self.fault: Optional[str] = None
        self.sampler_error: Optional[BaseException] = None
        self.parts: List[Tuple[Any, str]] = []
        self.emitted: Callable[[], int] = lambda: 0
        self.committed: Callable[[], int] = lambda: 0

    def remember_redis(self) -> None:
        self.redis_run_id = redis_id(self.redis)

    def redis_lost(self, client: Any = None) -> Optional[str]:
        """Why the run's state in Redis cannot be trusted any more (it restarted, its keys are gone);
        None while it can, or while Redis does not answer (an outage is timed elsewhere)."""
        import redis

        if not self.state_written:
            return None
        client = client or self.redis
        try:
            now_id = redis_id(client)
            present = bool(client.exists(redis_key(self.prefix, "control")))
        except redis.RedisError:
            return None
        return redis_loss(self.now(), self.redis_run_id, now_id, present)

    def broker_lost(self, exc: BaseException, t: float) -> str:
        """The reason of a lost broker connection: wait (bounded) for the broker and say what it lost."""
        import pika.exceptions

        what = one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, 120)
        try:
            conn = retry_until(lambda: self.connect(self.amqp_url), self.BROKER_WAIT_S, time.monotonic,
                               time.sleep, (pika.exceptions.AMQPError, OSError), 1.0)
        except (pika.exceptions.AMQPError, OSError):
            return (f"RabbitMQ unreachable since t={t:.0f} s ({what}) and not back within {self.BROKER_WAIT_S:.0f} s: "
                    f"the job's queues are on it; the run cannot go on")
        if not self._entry_gone(conn):
            return (f"RabbitMQ closed the run's connections at t={t:.0f} s ({what}); the job mode does not "
                    f"reconnect, the run cannot go on")
        try:
            uncommitted = f", and with them the {max(0, self.emitted() - self.committed())} item(s) not yet committed"
        except Exception:  # Redis is what failed too
            uncommitted = ""
        return (f"RabbitMQ restarted at t={t:.0f} s ({what}): the job's queues are transient and went with "
                f"it{uncommitted}; the run cannot go on")

    def _entry_gone(self, conn: Any) -> bool:
        import pika.exceptions

        try:
            conn.channel().queue_declare(entry_queue(self.prefix), passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker:
            return True
        finally:
            if conn.is_open:
                conn.close()

    def reason(self, exc: BaseException, who: str) -> str:
        """One line for the manifest: what failed (Redis' state first: losing it explains the rest)."""
        import pika.exceptions
        import redis

        t = self.now()
        lost = self.redis_lost()
        if lost:
            return lost
        if isinstance(exc, redis.RedisError):
            return f"Redis unreachable at t={t:.0f} s ({one_line(str(exc), 120)}): {who} could not go on"
        if isinstance(exc, pika.exceptions.AMQPError):
            return self.broker_lost(exc, t)
        return f"{who} failed at t={t:.0f} s: {one_line(f'{type(exc).__name__}: {exc}')}"

    def current(self) -> Optional[str]:
        """The reason the run cannot go on, if there is one (sampler, source, router)."""
        if self.fault:
            return self.fault
        for part, who in self.parts:
            if part.error is not None:
                return self.reason(part.error, who)
        if self.sampler_error is not None:
            return self.reason(self.sampler_error, "the measurements")
        return None

    def check(self) -> None:
        """Raises the reason the run cannot go on, if there is one."""
        reason = self.current()
        if reason is not None:
            raise LiveJobError(reason)

    def check_redis(self) -> None:
        lost = self.redis_lost()
        if lost:
            raise LiveJobError(lost)

    def diagnose_exit(self) -> None:
        """A worker exited: a broker or Redis failure explains it before the worker does."""
        self.check()
        self.check_redis()
        import pika.exceptions

        try:
            self.connect(self.amqp_url).close()
        except (pika.exceptions.AMQPError, OSError) as exc:
            raise LiveJobError(self.broker_lost(exc, self.now())) from exc
