"""Teammates inside unit processes: the serving loop, and a unit's handle on a child teammate.

``serve`` is the callable of a ``t`` unit's payload (pickled by reference, so the
zygote's preloaded copy runs): it builds the instance, runs its ``on_start()``
if it has one, then handles messages one
at a time in the unit's main thread, in the order they were sent, until a stop
or a cancel. The channel's reader thread only queues them (``ctx.open_inbox``),
so a long handler never keeps the channel from draining, and ``wu.current()``
works inside handlers as in any unit.

Failure semantics follow pykka: an exception from an *ask* goes back to the asker
and the teammate carries on; an exception from a *tell* has nobody to go to, so
it ends the teammate ``failed`` with that exception as its cause.
"""

from __future__ import annotations

import traceback
from typing import Any

import cloudpickle

from workunits._core.errors import Cancelled, InvalidArgument, NoSuchMethod, WrongType
from workunits._unit.context import UnitContext, current, pickle_error, too_large
from workunits._util import strictjson
from workunits._wire import frames as m


def serve(cls: type[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a teammate until stopped; returns what its ``on_stop()`` returns (the result)."""
    ctx = current()
    inbox = ctx.open_inbox()
    instance = cls(*args, **kwargs)
    # pykka's hook: each attempt runs it (a restarted teammate is built afresh), before
    # any message -- those sent meanwhile wait in the inbox. If it raises, the attempt fails.
    on_start = getattr(instance, "on_start", None)
    if callable(on_start):
        on_start()
    while True:
        frame = inbox.get()
        # Checked before every message: after a cancel, queued messages are not handled
        # (their asks fail with TeammateEnded when the unit ends).
        if ctx.cancelled:
            raise Cancelled(f"{ctx.id} was cancelled")
        if isinstance(frame, m.Stop):
            on_stop = getattr(instance, "on_stop", None)
            return on_stop() if callable(on_stop) else None
        if isinstance(frame, m.Deliver):
            _handle(ctx, instance, frame)


def _handle(ctx: UnitContext, instance: Any, frame: m.Deliver) -> None:
    try:
        message = cloudpickle.loads(frame.message)
        value = _dispatch(instance, message)
    except Exception as exc:
        if not frame.ask:
            raise
        raised = m.Error(
            type(exc).__qualname__, str(exc), traceback.format_exc(), pickle_error(exc)
        )
        ctx.send(m.Answer(frame.token, None, raised))
        return
    if frame.ask:
        result, error = _encode_answer(value)
        try:
            ctx.send(m.Answer(frame.token, result, error))
        except InvalidArgument:  # its frame would pass the channel's limit: nothing was sent
            size = 0 if result is None else len(result.value)
            message = too_large("the answer", value, size, "answer with")
            ctx.send(m.Answer(frame.token, None, m.Error("AnswerTooLarge", message, "", None)))


def _dispatch(instance: Any, message: Any) -> Any:
    if isinstance(message, m.ProxyCall):
        if message.name.startswith("_"):
            raise NoSuchMethod(f"{message.name!r} is private; a proxy calls public methods only")
        return getattr(instance, message.name)(*message.args, **message.kwargs)
    on_receive = getattr(instance, "on_receive", None)
    if on_receive is None:
        raise WrongType(
            f"{type(instance).__qualname__} has no on_receive(message) for a "
            f"{type(message).__qualname__} message"
        )
    return on_receive(message)


def _encode_answer(value: Any) -> tuple[m.ReturnValue | None, m.Error | None]:
    data = strictjson.dumps_if_exact(value)
    if data is not None:
        return m.ReturnValue(data, "json"), None
    try:
        return m.ReturnValue(bytes(cloudpickle.dumps(value)), "pickle"), None
    except Exception as exc:  # noqa: BLE001 - the asker is told; the teammate carries on
        message = f"the answer ({type(value).__qualname__}) cannot be pickled: {exc}"
        return None, m.Error("UnpicklableAnswer", message, "", None)
