"""Agents the MCP tests allow (``--allow-target tests.mcp_server.jobs:...``), by reference."""

from __future__ import annotations

import time
from pathlib import Path

import workunits as wu


def greet(name: str, times: int = 1) -> str:
    """Prints a greeting ``times`` times and returns it."""
    line = f"hello {name}"
    for _ in range(times):
        print(line, flush=True)
    return line


def count_to(n: int, gate: str) -> int:
    """Counts to ``n``, checkpointing each step; after the first step of the first
    attempt it waits for the file ``gate`` to exist (the test restarts the server then)."""
    ctx = wu.current()
    start = int(ctx.last_checkpoint or 0)
    print(f"attempt {ctx.attempt} starts at {start}", flush=True)
    for i in range(start + 1, n + 1):
        ctx.checkpoint(i)
        print(f"step {i}", flush=True)
        while ctx.attempt == 1 and i == 1 and not Path(gate).exists():
            time.sleep(0.01)  # a unit's own pace: polling a file it waits for
    return n
