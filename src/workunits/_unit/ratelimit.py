"""The token bucket that rate-limits a monitor's events (pure; the caller passes the time).

Runs in the monitor's unit process, so neither the supervisor nor a parent ever
sees more than ``rate`` events per second from one monitor, after an initial
burst of ``burst``.
"""

from __future__ import annotations

import math


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``; starts full."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a positive finite number, got {rate!r}")
        self.rate = rate
        self.burst = max(1.0, burst)
        self._tokens = self.burst
        self._last = now

    def _refill(self, now: float) -> None:
        if now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now

    def take(self, now: float) -> bool:
        """Spend a token if one is there; False means the event must be suppressed."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def next_at(self, now: float) -> float:
        """When the next token will be there (``now`` if one already is)."""
        self._refill(now)
        return now + max(0.0, (1.0 - self._tokens) / self.rate)
