"""The arguments every submit shares, checked in one place for every way in.

``Supervisor.submit`` (through its actor's registration chokepoint), a unit
asking for a child, and ``wu.connect().shell/agent`` all take a description,
a timeout, an idempotency key and a number of attempts; each refuses a bad one
here, with the same ``SpecError``, before any ID is minted.
"""

from __future__ import annotations

from workunits._errors import SpecError


def check_timeout(timeout: object) -> float | None:
    """A unit's time limit: None, or a positive number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise SpecError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return timeout


def check_submit(*, description: object, key: object, max_attempts: object) -> None:
    """Refuse a bad description, idempotency key or attempt count (the timeout: above)."""
    if not isinstance(description, str):
        raise SpecError(f"description must be a str, got {type(description).__name__}")
    if key is not None and (not isinstance(key, str) or not key):
        raise SpecError(f"key must be a non-empty str, got {key!r}")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise SpecError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
