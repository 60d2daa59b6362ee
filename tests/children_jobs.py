"""Bodies for the tests of a unit asking about its children, importable by reference."""

from __future__ import annotations

from typing import Any

import workunits as wu


def child() -> int:
    return 42


def ask_about_a_child_that_left_memory() -> dict[str, Any]:
    """Start a child, take its notice, wait for ``go`` (the child leaves memory meanwhile),
    then ask about it with every call a unit has; what each answered."""
    ctx = wu.current()
    handle = ctx.agent(child)
    ctx.wait(handle)
    notice = ctx.notifications().get(timeout=30)  # acknowledged: it may leave memory
    ctx.wait_for("go")
    answers: dict[str, Any] = {
        "notice": notice.id,
        "get": ctx.get(handle).status.value,
        "wait": ctx.wait(handle, timeout=5).status.value,
        "result": ctx.result(handle, timeout=5),
        "kill": ctx.kill(handle),
        "cancel": ctx.cancel(handle),
    }
    try:
        ctx.get("a00000000")
    except wu.UnknownWork as exc:  # caught by its class, as a supervisor's caller catches it
        answers["unknown"] = type(exc).__name__
    try:
        ctx.tell(handle, "hello")
    except wu.SpecError as exc:
        answers["tell"] = type(exc).__name__
    return answers


def stop_an_ended_teammate() -> dict[str, Any]:
    ctx = wu.current()
    mate = ctx.teammate(Echo)
    ctx.stop(mate)
    ctx.wait(mate)
    ctx.notifications().get(timeout=30)
    ctx.wait_for("go")
    answers: dict[str, Any] = {"stop": ctx.stop(mate)}
    try:
        ctx.tell(mate, "hello")
    except wu.TeammateEnded as exc:
        answers["tell"] = type(exc).__name__
    return answers


class Echo:
    def on_receive(self, message: Any) -> Any:
        return message
