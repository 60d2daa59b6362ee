"""Bodies for the retry and progress tests, importable by reference (so they can resume)."""

from __future__ import annotations

import threading

import workunits as wu


class Flaky(Exception):
    """What ``fail_until`` raises: a failure a policy names by type."""


def fail_until(good_attempt: int) -> int:
    """Raise ``Flaky`` on every attempt before ``good_attempt``; then return the attempt."""
    ctx = wu.current()
    ctx.progress(0.5, f"attempt {ctx.attempt}", attempt=ctx.attempt)
    if ctx.attempt < good_attempt:
        raise Flaky(f"attempt {ctx.attempt} is not good enough")
    return ctx.attempt


def raise_value_error() -> None:
    raise ValueError("not retried by a policy that names only Flaky")


def report_evidence() -> str:
    wu.current().progress(0.4, "group 3/8", done=3, total=8)
    return "reported"


def go_quiet(gate: str) -> str:
    """Report once, then stay quiet until ``gate`` (a file) exists."""
    wu.current().progress(0.1, "about to go quiet")
    stop = threading.Event()
    while not stop.wait(0.02):
        try:
            with open(gate) as f:
                return f.read()
        except FileNotFoundError:
            continue
    return ""
