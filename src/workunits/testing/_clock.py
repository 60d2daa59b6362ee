"""ManualClock: time that moves only when a test says so."""

from __future__ import annotations

import threading

from workunits._core.errors import InvalidArgument
from workunits._core.seconds import finite


class ManualClock:
    """A ``Clock`` (``now() -> float``) that stands still until ``advance`` or ``set``.

    Thread-safe: the supervisor actor's thread reads it while the test's thread
    moves it. It never goes backwards, because the supervisor's deadlines (cancel
    grace, timeouts, eviction) assume time only moves forward.

    Pair it with ``Supervisor(clock=clock, tick_interval=None)``: deadlines then
    run only when the test calls ``sup.tick()``, so "not before the grace" and
    "right after it" are both exact.
    """

    def __init__(self, start: float = 1_000_000.0) -> None:
        # Guards _now; held for O(1) work (a read, a compare, an add).
        self._lock = threading.Lock()
        self._now = _finite("start", start)

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"

    def now(self) -> float:
        """The current manual time, in seconds (any thread)."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time (any thread)."""
        seconds = _finite("seconds", seconds)
        if seconds < 0:
            raise InvalidArgument(f"a ManualClock never goes backwards; got advance({seconds!r})")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, t: float) -> float:
        """Jump to time ``t``, which must not be earlier than now; return it (any thread)."""
        t = _finite("t", t)
        with self._lock:
            if t < self._now:
                raise InvalidArgument(
                    f"a ManualClock never goes backwards: now {self._now}, set({t})"
                )
            self._now = t
            return t


def _finite(name: str, value: float) -> float:
    number = finite(value)
    if number is None:
        raise InvalidArgument(f"{name} must be a finite number of seconds, got {value!r}")
    return number
