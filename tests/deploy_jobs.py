"""Bodies for the deploy tests, importable by reference (so a later attempt can resume them)."""

from __future__ import annotations

import os
import time
from typing import Any

import workunits as wu


def await_approval() -> dict[str, Any]:
    """Note each attempt in a checkpoint, then wait (days, in real life) for ``approval``."""
    ctx = wu.current()
    seen = list((ctx.last_checkpoint or {}).get("attempts", []))
    seen.append(ctx.attempt)
    ctx.checkpoint({"attempts": seen})
    return {"approved": ctx.wait_for("approval"), "attempts": seen}


def count_with_checkpoints(until: str) -> int:
    """Count, checkpointing every 50 ms, until the file ``until`` exists; the count."""
    ctx = wu.current()
    n = int((ctx.last_checkpoint or {}).get("n", 0))
    while not os.path.exists(until):
        n += 1
        ctx.checkpoint({"n": n})
        time.sleep(0.05)  # the unit's own pace of work, not a synchronisation
    return n


def fail_twice_then_await_approval() -> dict[str, Any]:
    """Attempts 1 and 2 fail; a later one waits for ``approval`` as ``await_approval``."""
    if wu.current().attempt <= 2:
        raise RuntimeError(f"attempt {wu.current().attempt} fails")
    return await_approval()


def fail_once_after_deploys(deploys: int) -> int:
    """Wait for ``approval`` (to be handed over) for ``deploys`` attempts, fail the next
    one, and return the attempt after it."""
    ctx = wu.current()
    if ctx.attempt <= deploys:
        await_approval()
    if ctx.attempt == deploys + 1:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return ctx.attempt
