"""Agent bodies for the fault tests, importable as ``tests.faults.jobs:<name>``."""

from __future__ import annotations

import time
from pathlib import Path

import workunits as wu


def touch(path: str) -> str:
    """Create ``path``: a marker that proves the body ran."""
    Path(path).write_text("ran\n")
    return path


def add(a: int, b: int) -> int:
    return a + b


def count_runs(log: str) -> None:
    """Append this attempt's number to ``log`` (one line per run), then wait to be ended."""
    with open(log, "a") as f:
        f.write(f"{wu.current().attempt}\n")
    time.sleep(600)
