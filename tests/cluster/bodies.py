"""Bodies of the chaos test's units, importable by reference (``tests.cluster.bodies:agent``).

Each records its side effects in ``effects`` (one line per run of a body or a
step, appended with one ``write`` to an ``O_APPEND`` file, so lines from
concurrent processes never interleave), naming its unit ID and attempt: the
test counts them against the attempts the ledger gives each unit.
"""

from __future__ import annotations

import os
import time

import workunits as wu

# Between checkpoints: a cancel takes effect within about this long.
_BEAT = 0.05


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
        time.sleep(_BEAT)  # the unit's work: the test waits on the ledger, not on this
    return ctx.id


def _step(effects: str, unit: str, name: str, attempt: int, seconds: float) -> str:
    record(effects, f"step {unit} {attempt} {name}")
    time.sleep(seconds)  # the step's work
    return name


def workflow(effects: str, steps: int, seconds: float) -> list[str]:
    """``steps`` durable steps of ``seconds`` each: a resumed attempt skips the finished ones."""
    ctx = wu.current()
    record(effects, f"workflow {ctx.id} {ctx.attempt}")
    return [
        ctx.step(f"s{i}", _step, effects, ctx.id, f"s{i}", ctx.attempt, seconds)
        for i in range(steps)
    ]
