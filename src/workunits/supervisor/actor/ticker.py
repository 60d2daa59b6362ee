"""The Ticker: a thread that tells the supervisor actor ``Tick`` every interval.

Deadlines, output-cap checks, the eviction sweep and the ledger's polls all run
on ticks, so no actor ever sleeps or blocks waiting for time to pass. A tick is
an ordinary message, queued behind those sent before it (pykka's inbox, public
API only: issue 12). While the actor is busy with a backlog, the ticks it has
not handled yet are not added to: the next is sent once the last was handled,
so ticks missed meanwhile come once, not in a burst.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_FOR = 5.0  # seconds close() waits for the thread


class Ticker:
    """Calls ``tick`` every ``interval`` seconds on a daemon thread of its own, until ``close``."""

    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workunits-ticker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The Ticker's thread; ``tick`` must not block (it sends, never waits)."""
        while not self._stop.wait(self._interval):
            self._tick()

    def close(self) -> None:
        """Stop ticking and join the thread (any thread but the Ticker's)."""
        self._stop.set()
        self._thread.join(JOIN_FOR)
