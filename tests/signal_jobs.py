"""Bodies for the signal tests, importable by reference (so a later attempt can resume them)."""

from __future__ import annotations

from typing import Any

import workunits as wu


def approve() -> Any:
    """Wait for one ``approval``; return its value."""
    return wu.current().wait_for("approval")


def collect(name: str, n: int) -> list[Any]:
    """Wait for ``n`` signals ``name``; return their values in the order received."""
    ctx = wu.current()
    return [ctx.wait_for(name) for _ in range(n)]


def wait_briefly(name: str, timeout: float) -> Any:
    return wu.current().wait_for(name, timeout=timeout)


def gather() -> dict[str, Any]:
    """``a`` (then a checkpoint), ``b`` (announced by progress), ``c``; resumes after ``a``.

    A resumed attempt also looks for an ``a`` at once: the checkpoint consumed
    it, so none is there (``a_again`` is None).
    """
    ctx = wu.current()
    if ctx.last_checkpoint is None:
        a = ctx.wait_for("a")
        ctx.checkpoint({"a": a})
        a_again = None
    else:
        a = ctx.last_checkpoint["a"]
        try:
            a_again = ctx.wait_for("a", timeout=0)
        except wu.SignalTimeout:
            a_again = None
    b = ctx.wait_for("b")
    ctx.progress(0.5, f"got b={b}")
    c = ctx.wait_for("c")
    return {"a": a, "a_again": a_again, "b": b, "c": c, "attempt": ctx.attempt}
