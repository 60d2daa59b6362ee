"""Agent bodies for the fault tests, importable as ``tests.faults.jobs:<name>``."""

from __future__ import annotations

from pathlib import Path


def touch(path: str) -> str:
    """Create ``path``: a marker that proves the body ran."""
    Path(path).write_text("ran\n")
    return path


def add(a: int, b: int) -> int:
    return a + b
