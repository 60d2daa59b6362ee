"""The body of a remote task: runs inside a Ray worker, as a streaming generator.

Ray drives ``run_task`` from the worker's main thread; the user's callable runs
in a helper thread, so the generator can keep yielding the unit's output and
events while it works. The worker is left as it was found (fds, ``sys.stdout``,
``wu.current()``), because Ray reuses it for the next task.
"""

from __future__ import annotations

import os
import socket
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import cloudpickle
import orjson
import ray

from workunits._ray.worker.capture import FdCapture
from workunits._ray.worker.context import RemoteContext
from workunits._ray.worker.frames import RemoteCall, Returned, Started
from workunits._ray.worker.outbox import Outbox
from workunits._unit import context, descendants
from workunits._util import strictjson
from workunits._wire import frames as m


def run_task(call: RemoteCall, board: str) -> Iterator[list[Any]]:
    """The Ray task (a generator): yields lists of frames until the unit is done.

    ``board``: the name of the supervisor's cancel board (see ``RemoteContext``).
    """
    outbox = Outbox()
    ctx = RemoteContext(
        work_id=call.unit_id,
        kind=call.kind,
        attempt=call.attempt,
        last_checkpoint=None if call.checkpoint is None else orjson.loads(call.checkpoint),
        outbox=outbox,
        board=board,
        board_key=call.key,
    )
    with installed(ctx):
        capture = FdCapture(outbox)
        capture.start()
        outbox.put(started())
        body = threading.Thread(
            target=_body, args=(call, capture, outbox), name="workunits-remote-body", daemon=True
        )
        body.start()
        yield from outbox.batches()
        body.join()


class installed:  # noqa: N801 - reads as a statement: ``with installed(ctx):``
    """Make ``ctx`` what ``wu.current()`` returns for the length of a ``with`` block."""

    def __init__(self, ctx: RemoteContext) -> None:
        self._ctx = ctx
        self._previous: context.UnitContext | None = None

    def __enter__(self) -> RemoteContext:
        self._previous = context._current
        context._current = self._ctx
        return self._ctx

    def __exit__(self, *exc: object) -> None:
        context._current = self._previous


def started() -> Started:
    node_id = str(ray.get_runtime_context().get_node_id())
    return Started(pid=os.getpid(), host=socket.gethostname(), node_id=node_id)


def _body(call: RemoteCall, capture: FdCapture, outbox: Outbox) -> None:
    """The helper thread: run the callable, then send its output, then its outcome.

    Ray's worker runs task after task: the processes the callable started end
    with it (DESIGN §2.9), not with the worker.
    """
    before = frozenset(descendants.children(os.getpid()))
    try:
        fn, args, kwargs = cloudpickle.loads(call.payload)
        final = encode_result(fn(*args, **kwargs))
    except SystemExit as exc:
        # As for agents: sys.exit() / sys.exit(0) completes, any other code fails.
        final = encode_result(None) if exc.code in (None, 0) else encode_error(exc)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
        final = encode_error(exc)
    finally:
        descendants.end_children(spare=before)
        capture.stop()
    outbox.put(final)
    outbox.close()


def encode_result(value: Any) -> Returned | m.Error:
    """A return value as JSON when it survives JSON unchanged, else cloudpickle."""
    data = strictjson.dumps_if_exact(value)
    if data is not None:
        return Returned(m.ReturnValue(data, "json"), "")
    try:
        blob = bytes(cloudpickle.dumps(value))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result fails the unit, saying so
        message = f"the return value ({type(value).__qualname__}) cannot be pickled: {exc}"
        return m.Error("UnpicklableResult", message, "", None)
    return Returned(m.ReturnValue(blob, "pickle"), repr(value)[:1000])


def encode_error(exc: BaseException) -> m.Error:
    tb = "".join(traceback.format_exception(exc))
    return context.error_frame(exc, tb)
