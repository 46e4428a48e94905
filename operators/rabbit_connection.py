"""The life cycle of a RabbitMQ connection that must outlive broker restarts, shared by the operators'
source and publisher: a pika ``SelectConnection`` run on the owner's own I/O thread, opened again after
each loss with a wait that doubles up to a bound and starts over once a connection has worked.

The owner opens its channel in ``_on_channel_open`` and says, through the hooks, what a lost
connection means for what it holds (stale deliveries, unconfirmed messages)."""
from __future__ import annotations

import logging
import re
import threading
from typing import Any

log = logging.getLogger(__name__)


def safe_url(url: str) -> str:
    """The URL without its password (for messages)."""
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


class ReconnectingConnection:
    """The connect / serve / reconnect loop. The owner sets ``url``, ``reconnect_initial_s``,
    ``reconnect_max_s`` and ``_stopping`` (a ``threading.Event``), runs ``_serve_connections`` as its I/O
    thread and implements ``_on_channel_open``; the other hooks default to doing nothing."""

    role = "rabbit connection"  # how the log lines name the owner
    url: str
    reconnect_initial_s: float
    reconnect_max_s: float
    _stopping: threading.Event
    _conn: Any = None
    _channel: Any = None

    def _serve_connections(self) -> None:
        import pika

        backoff = self.reconnect_initial_s
        while not self._stopping.is_set():
            self._connecting()
            try:
                params = pika.URLParameters(self.url)
                self._configure(params)
                self._conn = pika.SelectConnection(
                    params, on_open_callback=self._on_connection_open,
                    on_open_error_callback=self._on_connection_open_error,
                    on_close_callback=self._on_connection_closed)
                self._conn.ioloop.start()
            except Exception as exc:  # noqa: BLE001 - any failure means: reconnect
                self._failed(exc)
                log.warning("%s: %r", self.role, exc)
            finally:
                had_channel = self._channel is not None
                self._conn = None
                self._channel = None
                worked = self._lost(had_channel)
            if self._stopping.is_set():
                break
            if worked:
                backoff = self.reconnect_initial_s  # it worked for a while: retry quickly
            log.warning("%s: connection lost%s; reconnecting in %.1f s", self.role, self._why(), backoff)
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, self.reconnect_max_s)
        self._stopped()

    def _close_connection(self) -> None:
        """Close from the I/O thread (the loop then ends the serving, and `_stopping` ends the loop)."""
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()
        elif conn is not None:
            conn.ioloop.stop()

    def _on_connection_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_connection_open_error(self, conn: Any, err: Any) -> None:
        self._open_failed(err)
        conn.ioloop.stop()

    def _on_connection_closed(self, conn: Any, reason: Any) -> None:
        if not self._stopping.is_set():
            self._closed(reason)
        conn.ioloop.stop()

    # -- the owner's hooks ---------------------------------------------------------------------

    def _on_channel_open(self, channel: Any) -> None:
        raise NotImplementedError

    def _connecting(self) -> None:
        """Before each attempt to connect."""

    def _configure(self, params: Any) -> None:
        """Set connection parameters (pika.URLParameters) before connecting."""

    def _failed(self, exc: BaseException) -> None:
        """The connection attempt or its I/O loop raised."""

    def _open_failed(self, err: Any) -> None:
        """The broker could not be reached or refused the connection."""

    def _closed(self, reason: Any) -> None:
        """The connection closed while the owner was not stopping."""

    def _lost(self, had_channel: bool) -> bool:
        """The connection is gone (connection and channel already cleared); True when it worked for a
        while, so that the next attempt comes quickly."""
        return had_channel

    def _why(self) -> str:
        """What the reconnect line adds after 'connection lost'."""
        return ""

    def _stopped(self) -> None:
        """The loop has ended for good."""
