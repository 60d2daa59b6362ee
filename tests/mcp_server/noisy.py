"""A module that writes to stdout wherever it runs: at import (in the server and the zygote,
through ``--import``), and in its agent. None of it may reach the MCP server's stdout."""

from __future__ import annotations

import os
import sys

print("NOISE at import", flush=True)
os.write(1, b"NOISE on fd 1 at import\n")


def shout() -> str:
    print("NOISE from an agent", flush=True)
    print("NOISE on stderr from an agent", file=sys.stderr, flush=True)
    return "shouted"
