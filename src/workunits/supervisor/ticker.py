"""The Ticker: tells the supervisor actor "tick" at a fixed interval.

Deadlines, output-cap checks and the eviction sweep all run on ticks, so no
actor ever sleeps or blocks waiting for time to pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workunits-ticker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Runs in the Ticker thread; ``tick`` must not block (it is a pykka tell)."""
        while not self._stop.wait(self._interval):
            self._tick()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
