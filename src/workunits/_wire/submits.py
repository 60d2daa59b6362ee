"""The arguments every submit shares, checked in one place for every way in.

``Supervisor.submit`` (through its actor's registration chokepoint), a unit
asking for a child, and ``wu.connect().shell/agent`` all take a description,
a timeout, an idempotency key and a number of attempts; each refuses a bad one
here, with the same ``SpecError``, before any ID is minted.
"""

from __future__ import annotations

import datetime

from workunits._core.errors import SpecError
from workunits._core.retry import Retry, check_max_attempts
from workunits._core.seconds import finite, seconds_or_none


def check_timeout(timeout: object) -> float | None:
    """A unit's time limit: None, or a positive number of seconds."""
    return seconds_or_none("timeout", timeout, none="no time limit")


def check_description(description: object) -> None:
    """A unit's description: a str (the verbs give it a default before it comes here)."""
    if not isinstance(description, str):
        raise SpecError(f"description must be a str, got {type(description).__name__}")


def check_key(key: object) -> None:
    """An idempotency key: None, or a non-empty str."""
    if key is not None and (not isinstance(key, str) or not key):
        raise SpecError(f"key must be a non-empty str, got {key!r}")


def check_attempt_count(max_attempts: object) -> None:
    """``max_attempts``: None, or an int from 1 to MAX_ATTEMPTS."""
    if max_attempts is not None:
        check_max_attempts("max_attempts", max_attempts)


def check_submit(*, description: object, key: object, max_attempts: object) -> None:
    """Refuse a bad description, idempotency key or attempt count (the timeout: above)."""
    check_description(description)
    check_key(key)
    check_attempt_count(max_attempts)


def check_attempts(retry: Retry | None, max_attempts: int | None) -> int | None:
    """The one attempt counter: ``retry``'s ``max_attempts``, or ``max_attempts``, not both."""
    if retry is None:
        return max_attempts
    if max_attempts is not None and max_attempts != retry.max_attempts:
        raise SpecError(
            f"max_attempts={max_attempts} and retry=Retry(max_attempts={retry.max_attempts}) "
            f"disagree: one counter serves retries and resumes; give it once, in Retry"
        )
    return retry.max_attempts


def check_stall_after(stall_after: object) -> float | None:
    """Seconds a unit may stay quiet before its parent hears: None, or a positive number."""
    return seconds_or_none("stall_after", stall_after, none="never a StallEvent")


def check_not_before(not_before: object, now: float) -> float | None:
    """When a unit may start, as seconds since the epoch: None (at once), a ``datetime``
    (a naive one is local time), or a number of seconds from ``now``.

    The time must fall before the year 10000, the last a ``datetime`` (and so
    every view of the unit) can show: a larger delay is most often an epoch
    time passed as a number of seconds from now.
    """
    if not_before is None:
        return None
    if isinstance(not_before, datetime.datetime):
        return not_before.timestamp()
    delay = finite(not_before)
    if delay is None or delay < 0:
        raise SpecError(
            f"not_before must be a datetime or a number of seconds >= 0 from now, "
            f"got {not_before!r}"
        )
    start_at = now + delay
    if start_at > LATEST_START:
        raise SpecError(
            f"not_before={not_before!r} seconds from now is past the year 9999; it is a "
            f"delay, not a time: give seconds from now, or a datetime"
        )
    return start_at


# The last second a datetime can show (9999-12-31 23:59:59 UTC), as seconds since the epoch.
LATEST_START = datetime.datetime.max.replace(microsecond=0, tzinfo=datetime.UTC).timestamp()
