"""Bodies for the large-value tests, importable by reference (so they can resume)."""

from __future__ import annotations

import hashlib
import os
import time

import workunits as wu


def digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def size_of(data: bytes) -> int:
    return len(data)


def big_result(size: int) -> str:
    return "r" * size


def wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def resume_from_big_checkpoint(text: str, gate: str) -> dict[str, object]:
    """Checkpoint a large state twice, wait at ``gate``; a resumed attempt reports its state."""
    ctx = wu.current()
    if ctx.last_checkpoint is None:
        ctx.checkpoint({"blob": "a" * len(text), "n": 1})
        ctx.checkpoint({"blob": "b" * len(text), "n": 2})
        ctx.progress(0.5, "checkpointed")
    wait_for(gate)
    state = ctx.last_checkpoint
    return {
        "attempt": ctx.attempt,
        "spec": digest(text),
        "n": None if state is None else state["n"],
        "blob": None if state is None else digest(state["blob"]),
    }
