"""Bodies of the chaos test's units, importable by reference (``tests.cluster.bodies:agent``).

Each records its side effects in ``effects`` (one line per run of a body or a
step, appended with one ``write`` to an ``O_APPEND`` file, so lines from
concurrent processes never interleave), naming its unit ID and attempt: the
test counts them against the attempts the ledger gives each unit.
"""

from __future__ import annotations

import contextlib
import os
import time

import workunits as wu

# Between checkpoints (a resumed attempt goes on from the last one).
_BEAT = 0.05
_NO_SIGNAL = "never-sent"  # what the units' work waits for, timed: nobody sends it


def _work(seconds: float) -> None:
    """The unit's work: ``seconds`` of a timed wait that a cancel cuts short (Cancelled)."""
    with contextlib.suppress(wu.SignalTimeout):
        wu.current().wait_for(_NO_SIGNAL, timeout=seconds)


def record(effects: str, line: str) -> None:
    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def agent(effects: str, seconds: float) -> str:
    """Run for ``seconds``, checkpointing as it goes; a resumed attempt records again."""
    ctx = wu.current()
    record(effects, f"agent {ctx.id} {ctx.attempt}")
    deadline = time.monotonic() + seconds
    beats = 0
    while time.monotonic() < deadline:
        beats += 1
        ctx.checkpoint({"beats": beats})  # raises Cancelled at a requested cancel
        _work(_BEAT)
    return ctx.id


def _step(effects: str, unit: str, name: str, attempt: int, seconds: float) -> str:
    record(effects, f"step {unit} {attempt} {name}")
    _work(seconds)
    return name


def workflow(effects: str, steps: int, seconds: float) -> list[str]:
    """``steps`` durable steps of ``seconds`` each: a resumed attempt skips the finished ones."""
    ctx = wu.current()
    record(effects, f"workflow {ctx.id} {ctx.attempt}")
    return [
        ctx.step(f"s{i}", _step, effects, ctx.id, f"s{i}", ctx.attempt, seconds)
        for i in range(steps)
    ]
