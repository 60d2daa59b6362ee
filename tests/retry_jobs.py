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


def child_then_fail(take_in_first: bool) -> dict[str, object]:
    """Attempt 1 starts a shell child, waits for its end (and takes its notice, if told),
    checkpoints the child's ID and fails. The next attempt waits on that child and
    looks for its notice."""
    ctx = wu.current()
    if ctx.attempt == 1:
        child = ctx.shell(["true"])
        ctx.wait(child, timeout=30)
        if take_in_first:
            ctx.notifications().get(timeout=30)
        ctx.checkpoint({"child": child.id})
        raise Flaky("attempt 1 fails once its child has ended")
    child_id = ctx.last_checkpoint["child"]
    waited = ctx.wait(child_id, timeout=10)  # ended before this attempt's process began
    try:
        # Taken in attempt 1: none may come (a bounded look); else it must come.
        notice = ctx.notifications().get(timeout=0.5 if take_in_first else 30)
        assert isinstance(notice, wu.Notification)
        taken: object = [notice.id == child_id, notice.redelivered]
    except wu.NoNotification:
        taken = None
    return {"waited": waited.status.value, "notice": taken}


def start_a_keyed_child(key: str | None) -> list[str]:
    """Start a child (under ``key``), fail the first attempt, and return the IDs started."""
    ctx = wu.current()
    child = ctx.shell(["true"], key=key)
    if ctx.attempt == 1:
        raise Flaky("the child is started; this attempt fails")
    ctx.wait(child, timeout=30)
    return [child.id]


def children_with_options(gate: str) -> dict[str, object]:
    """Start children with retry=, stall_after= and not_before=, as a top-level submit takes."""
    ctx = wu.current()
    flaky = ctx.agent(fail_until, 2, retry=wu.Retry(initial=0.01, jitter=False))
    quiet = ctx.agent(go_quiet, gate, stall_after=0.2)
    held = ctx.shell(["true"], not_before=3600)
    stall = None
    while stall is None:  # the first child's end may come first: its notice, then the stall
        item = ctx.notifications().get(timeout=30)
        if isinstance(item, wu.StallEvent):
            stall = item
    with open(gate, "w") as f:
        f.write("went on")
    return {
        "flaky": ctx.result(flaky, timeout=30),
        "stalled": stall.id == quiet.id,
        "quiet": ctx.result(quiet, timeout=30),
        "held": ctx.get(held).status.value,
    }
