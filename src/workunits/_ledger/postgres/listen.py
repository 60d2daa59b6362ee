"""``WakeListener``: one LISTEN connection per supervisor on a PostgreSQL ledger.

Writers that add work for a supervisor (requests, signals, retains, pending
units from clients) send a NOTIFY in their transaction (``backend.WAKE_CHANNEL``).
This thread listens on its own connection (not one of the pool's: a LISTEN
belongs to a session, and a pooled connection is shared) and calls ``wake``
once per burst of notifications, so the supervisor applies requests now
rather than at its next tick.

The requests table stays the durable record: a notification lost (the
connection dropped, the server restarted) only costs latency, since the ticks
still poll. After a reconnect the listener wakes the supervisor once, for
whatever was sent while it was away. ``close`` stops the thread within one
poll interval (``POLL``), and the thread closes its connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from workunits._ledger.backend import WAKE_CHANNEL

log = logging.getLogger(__name__)

POLL = 0.25  # seconds between looks at the stop flag while no notification comes
RECONNECT_AFTER = (0.05, 0.2, 1.0, 2.0)  # back-off after a lost connection, then the last
APPLICATION_NAME = "workunits-listener"  # what pg_stat_activity shows for this connection


class WakeListener:
    """Calls ``wake()`` (in the listener's daemon thread; it must not block) on notifications."""

    def __init__(self, url: str, wake: Callable[[], None]) -> None:
        import psycopg  # noqa: PLC0415 - the optional [postgres] extra, present with its ledger

        self._psycopg: Any = psycopg
        self._url = url
        self._wake = wake
        self._stop = threading.Event()
        self.connects = 0  # how many times a LISTEN was set up (tests watch reconnects)
        self._thread = threading.Thread(target=self._run, name="workunits-listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The listener thread: connect and LISTEN, relay notifications, reconnect on loss."""
        failures = 0
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except self._psycopg.Error as exc:
                delay = RECONNECT_AFTER[min(failures, len(RECONNECT_AFTER) - 1)]
                failures += 1
                log.warning("workunits: cannot listen for wake-ups (%s); again in %s s", exc, delay)
                self._stop.wait(delay)
                continue
            failures = 0
            if self.connects > 1:
                self._wake()  # what was sent while no one listened
            try:
                self._relay(conn)
            except self._psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("workunits: lost the wake-up connection (%s); reconnecting", exc)
            finally:
                conn.close()

    def _connect(self) -> Any:
        conn = self._psycopg.connect(
            self._url, autocommit=True, application_name=APPLICATION_NAME, connect_timeout=10
        )
        try:
            conn.execute(f"LISTEN {WAKE_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        self.connects += 1
        return conn

    def _relay(self, conn: Any) -> None:
        while not self._stop.is_set():
            if not list(conn.notifies(timeout=POLL, stop_after=1)):
                continue
            # Every notification already here is the same wake-up: a burst of
            # requests costs the supervisor one pass over the table, not one each.
            for _ in conn.notifies(timeout=0.0):
                pass
            self._wake()

    def close(self) -> None:
        """Stop the thread and close its connection; from any thread, once or more."""
        self._stop.set()
        self._thread.join(timeout=POLL + 5)
