"""Time as a dependency, so grace periods, deadlines and eviction need no waiting in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch; used for record times and for deadlines."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()
