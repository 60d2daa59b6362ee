"""Importable unit bodies for the HTTP tests (the API names agents as ``module:qualname``)."""

from __future__ import annotations

import sys
import time

import workunits as wu


def add(a: int, b: int) -> int:
    return a + b


def boom(message: str) -> None:
    raise ValueError(message)


def ticker(n: int, pause: float, stamp: bool = False) -> int:
    """Print ``line i`` and report progress i/n, n times, ``pause`` seconds apart.

    With ``stamp`` each progress message is the wall time it was sent (for latency).
    """
    ctx = wu.current()
    for i in range(n):
        print(f"line {i}", flush=True)
        ctx.progress((i + 1) / n, repr(time.time()) if stamp else f"step {i + 1}/{n}")
        time.sleep(pause)
    return n


def sleeper(seconds: float) -> None:
    sys.stdout.write("sleeping\n")
    sys.stdout.flush()
    time.sleep(seconds)


def stamper(n: int, pause: float) -> None:
    """Report progress n times, its message the wall time it was sent (for latency)."""
    ctx = wu.current()
    for i in range(n):
        ctx.progress((i + 1) / n, repr(time.time()))
        time.sleep(pause)


def saver(n: int, pause: float) -> int:
    """Checkpoint ``{"i": i}`` n times, ``pause`` seconds apart; then one large state."""
    ctx = wu.current()
    for i in range(n):
        ctx.checkpoint({"i": i})
        time.sleep(pause)
    ctx.checkpoint({"blob": "x" * 10_000})
    return n


def waiter(name: str) -> object:
    """Return the value of the first signal ``name`` (waits at most 30 s)."""
    return wu.current().wait_for(name, timeout=30)


def flaky(marker: str) -> str:
    """Fail on the first attempt (no ``marker`` file yet), succeed on the next."""
    import pathlib  # noqa: PLC0415 - only this body needs it

    path = pathlib.Path(marker)
    if not path.exists():
        path.write_text("tried")
        raise ValueError("first attempt fails")
    return "second time lucky"


def evidenced() -> str:
    """Report progress with evidence, then finish (its record keeps both)."""
    wu.current().progress(0.4, "group 3/8", done=3, total=8)
    return "ok"


def pair() -> tuple[int, int]:
    """A result JSON would bring back as a list: it is pickled, and HTTP refuses it."""
    return (1, 2)


def not_a_number() -> float:
    return float("nan")
