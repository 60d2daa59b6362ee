"""Bodies of the units in the state dir made by the previous release (tests/fixtures).

Importable by reference from the ``tests`` package, as the old supervisor
stored them, so the new one can resume them.
"""

from __future__ import annotations

import time
from typing import Any

import workunits as wu


def survive(value: int) -> dict[str, Any]:
    """First attempt: checkpoint, then wait to be lost with its supervisor. Later: finish."""
    ctx = wu.current()
    if ctx.attempt == 1:
        ctx.checkpoint({"value": value})
        time.sleep(600)  # the fixture's supervisor is SIGKILLed while this sleeps
    return {"attempt": ctx.attempt, "checkpoint": ctx.last_checkpoint}


def done(value: int) -> int:
    return value * 2
