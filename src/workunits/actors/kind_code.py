"""``call_kind``: the one way the supervisor's process calls a kind's code.

A kind's code (a ``WorkActor`` subclass's hooks, class methods and handlers:
``validate_spec``, ``to_durable``, ``launch``, ``signal_work``, ``on_receive``,
``end_on_exit``...) runs on the supervisor's thread, the Reaper's or its
actor's. An ``Exception`` from it fails the unit (or the submit) it was called
for. What is not one -- ``SystemExit`` from ``sys.exit``, ``KeyboardInterrupt``,
``asyncio.CancelledError`` from asyncio work, ``wu.Cancelled`` -- would go much
further (invariant 14): pykka's actor loop answers it by stopping every actor
in the process, the supervisor's included, and it would end the Reaper's
thread. So it is raised again as a ``KindFault`` (an Exception, from it), right
where the kind was called, and goes the way of any other error of the kind's.

Except on the main thread: Python runs signal handlers there only, so there a
``KeyboardInterrupt`` (or a handler's ``SystemExit``) may be the process's
own, arrived while the kind's code happened to run, and it is the caller's.
Off the main thread nothing but the code called raises one.

The runtime's own ways to stop are untouched: pykka stops an actor with a
message, and tells a dead one's callers with ``ActorDeadError`` (an Exception).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from workunits._core.errors import KindFault

R = TypeVar("R")


def call_kind(kind: type, fn: Callable[..., R], *args: Any, hook: str | None = None) -> R:
    """``fn(*args)``, code of the kind ``kind`` (a WorkActor class), with its faults contained.

    ``hook`` names the call in the fault's message (default: ``fn``'s name).
    """
    try:
        return fn(*args)
    except BaseException as exc:
        name = hook if hook is not None else str(getattr(fn, "__name__", fn))
        fault = contained(exc, kind, name)
        if fault is exc:
            raise
        raise fault from exc


def contained(exc: BaseException, kind: type | None, hook: str) -> BaseException:
    """What to raise for ``exc``, raised by ``hook`` of ``kind`` (None: not known).

    ``exc`` itself when it is an Exception, or when it may be the process's own
    (on the main thread); else a ``KindFault`` that names the kind's bug.
    """
    if isinstance(exc, Exception) or threading.current_thread() is threading.main_thread():
        return exc
    if kind is None:
        whose = "code the supervisor called"
    else:
        whose = f"the {getattr(kind, 'kind', '?')!s} kind ({kind.__qualname__})"
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return KindFault(
        f"{hook} of {whose} raised {what}, which is not an Exception: a bug in that kind "
        f"(uncaught, it would stop every actor of the supervisor)"
    )
