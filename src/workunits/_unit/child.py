"""The body of a unit process: set up capture and context, run the callable, report.

Runs in a process the zygote forked for this unit, or in a warm process it
forked ahead of demand, which ran ``prepare`` before its unit was known. The
transcript is written only through the ``Capture`` (see capture.py), so its
lines keep the unit's program order and its size stays under the output cap.
Returns the exit code; the zygote's child code calls ``os._exit`` with it, so
nothing inherited from the zygote runs at exit.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import traceback
from typing import Any

import cloudpickle
import orjson

from workunits._core.errors import Cancelled, InvalidArgument
from workunits._unit import context as _context
from workunits._unit import tracing
from workunits._unit.capture import Capture
from workunits._util import framing, strictjson
from workunits._wire import frames as m
from workunits._wire import unpickle
from workunits._wire.pool_protocol import WORKER_KIND
from workunits._wire.zygote_protocol import SpawnCall

EXIT_OK = 0
EXIT_RAISED = 1


def prepare(reuse: Capture | None = None, *, reusable: bool = False) -> Capture:
    """The part of a unit process's set-up that needs no unit: a warm process does it ahead.

    Standard input from /dev/null; fds 1 and 2 routed to a capture that writes
    nowhere until ``run_unit`` binds it to the unit's transcript. A pooled
    worker makes one ``reusable`` capture and gives it back as ``reuse`` before
    each next unit (``Capture.rearm``): its pipes and pump thread serve them all.
    """
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if reuse is not None:
        reuse.rearm()
        return reuse
    capture = Capture(reusable=reusable)
    capture.start()
    return capture


def rehearse() -> None:
    """Go once through a unit's start and its result, on throwaway objects, without a unit.

    A warm process shares its memory with the zygote until it writes to it, and
    CPython writes to every object it touches (reference counts) and to the
    bytecode it runs: each first write to a page copies it (a page fault, ~100
    of them on a unit's way to its function, measured). A spare that went this
    way once has made those copies while it waited, not on its unit's way in.
    Nothing of it stays: the capture and context made here are not the
    process's, and what they write goes to /dev/null and to a socket pair
    closed at once. Never blocks.
    """
    ours, theirs = socket.socketpair()
    sink = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        call = SpawnCall(
            unit_id=_REHEARSAL_ID, kind="agent", payload=cloudpickle.dumps((_nothing, (), {}))
        )
        (call,) = framing.FrameReader().feed(framing.encode_plain(call))
        capture = Capture()  # never started: fds 1 and 2 stay the spare's
        ctx = _begin(call, ours, capture, sink, checkpoint=None)
        fn, args, kwargs = cloudpickle.loads(call.payload)
        _report_result(fn(*args, **kwargs), ctx, capture)
        with contextlib.suppress(BlockingIOError):
            framing.FrameReader().feed(theirs.recv(1 << 16, socket.MSG_DONTWAIT))
    finally:
        ours.close()
        theirs.close()
        os.close(sink)


_REHEARSAL_ID = "a00000000"


def _nothing() -> None:
    return None


def run_unit(
    call: SpawnCall,
    transcript_fd: int,
    channel_fd: int,
    capture: Capture | None = None,
    *,
    keep_capture: bool = False,
) -> int:
    """Run the unit ``call`` in this process; ``capture`` is ``prepare()``'s, if it ran.

    ``keep_capture``: the capture stays bound when this returns (a pooled worker
    unbinds it once what the unit left is ended); else it is closed here.
    """
    _take_environment(call)
    if call.kind == WORKER_KIND:  # not a unit: a pooled worker, which runs units itself
        from workunits._unit.worker import serve  # noqa: PLC0415 - it imports this module

        return serve(channel_fd, transcript_fd)
    if capture is None:
        capture = prepare()
    channel = socket.socket(fileno=channel_fd)
    checkpoint = None if call.checkpoint is None else orjson.loads(call.checkpoint)
    ctx = _begin(call, channel, capture, transcript_fd, checkpoint=checkpoint)
    _context._current = ctx
    try:
        code = _run(call, ctx, capture)
    finally:
        if not keep_capture:
            capture.close(timeout=1.0)
    return code


def report_start_failure(channel_fd: int, exc: BaseException) -> None:
    """In a unit's process that failed around its function (its limits, its payload, its
    capture, a thread it could not start): tell the unit's actor why, so the unit fails
    with that cause and not only an exit code. Best effort: the channel may be the
    failure. Call it from the ``except`` that caught ``exc``."""
    with contextlib.suppress(BaseException):
        message = f"its process could not run it: {type(exc).__qualname__}: {exc}"
        error = m.Error("StartFailed", message, traceback.format_exc(), None)
        with socket.socket(fileno=os.dup(channel_fd)) as channel:
            framing.send(channel, error)


def _begin(
    call: SpawnCall,
    channel: socket.socket,
    capture: Capture,
    transcript_fd: int,
    *,
    checkpoint: Any,
) -> _context.UnitContext:
    """A unit's context, its capture bound to its transcript, and the transcript's start."""
    ctx = _context.UnitContext(
        work_id=call.unit_id,
        kind=call.kind,
        attempt=call.attempt,
        last_checkpoint=checkpoint,
        channel=channel,
        transcript=capture,
    )
    capture.bind(
        transcript_fd,
        call.first_seq,
        call.transcript_cap,
        on_cap=lambda: _report_cap(ctx, call.transcript_cap),
    )
    # The first line says what the unit runs under, and what of it is enforced.
    under = {} if call.sandbox is None else {"sandbox": call.sandbox}
    capture.write("start", id=call.unit_id, attempt=call.attempt, pid=os.getpid(), **under)
    return ctx


def _take_environment(call: SpawnCall) -> None:
    """The variables the unit's confinement gives it (its TMPDIR...), before its code."""
    if call.confinement is None or not call.confinement.env:
        return
    os.environ.update(call.confinement.env)
    if "TMPDIR" in dict(call.confinement.env):
        tempfile.tempdir = None  # read TMPDIR again


def _report_cap(ctx: _context.UnitContext, cap: int | None) -> None:
    """The capture stopped at the cap: the actor kills us (reason output-cap)."""
    with contextlib.suppress(OSError):  # the supervisor is gone: nobody to tell
        ctx.send(m.OutputCapped(cap or 0))


def _run(call: SpawnCall, ctx: _context.UnitContext, transcript: Capture) -> int:
    try:
        # A resumed unit's call may have been pickled by an older version.
        fn, args, kwargs = unpickle.loads(call.payload)
        with tracing.unit_span(call.traceparent):
            value = fn(*args, **kwargs)
    except SystemExit as exc:
        code = _exit_code(exc)
        transcript.write("exit", code=code)
        return code
    except Cancelled as exc:
        if not ctx.cancelled:  # raised by the unit's own code, not at a cancel asked for
            return _raised(exc, ctx, transcript)
        # Stopped where it was asked to (a checkpoint, a progress report, a wait): not
        # a failure, and nothing for its transcript but that it was cancelled -- or,
        # at a deploy, nothing at all: its actor writes that it was handed over.
        if not ctx.handed_over:
            transcript.write("cancelled", message=str(exc))
        return m.EXIT_CANCELLED
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
        return _raised(exc, ctx, transcript)
    return _report_result(value, ctx, transcript)


def _raised(exc: BaseException, ctx: _context.UnitContext, transcript: Capture) -> int:
    """Report what the unit's code raised; the exit code that says it did."""
    tb = "".join(traceback.format_exception(exc))
    ctx.send(_context.error_frame(exc, tb))
    transcript.write("error", error_type=type(exc).__qualname__, message=str(exc), traceback=tb)
    return EXIT_RAISED


def _report_result(value: Any, ctx: _context.UnitContext, transcript: Capture) -> int:
    data = strictjson.dumps_if_exact(value)
    if data is not None:
        if not _send_result(m.ReturnValue(data, "json"), value, ctx, transcript):
            return EXIT_RAISED
        transcript.write("result", value=value)
        return EXIT_OK
    try:
        blob = bytes(cloudpickle.dumps(value))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result fails the unit, saying so
        message = f"the return value ({type(value).__qualname__}) cannot be pickled: {exc}"
        _report_error("UnpicklableResult", message, ctx, transcript)
        return EXIT_RAISED
    if not _send_result(m.ReturnValue(blob, "pickle"), value, ctx, transcript):
        return EXIT_RAISED
    transcript.write("result", value=repr(value)[:1000], format="pickle")
    return EXIT_OK


def _send_result(
    result: m.ReturnValue, value: Any, ctx: _context.UnitContext, transcript: Capture
) -> bool:
    """Send the result; False when it is too large for the channel (the unit fails, saying so)."""
    try:
        ctx.send(result)
    except InvalidArgument:  # its frame would pass the channel's limit: nothing was sent
        message = _context.too_large("the return value", value, len(result.value), "return")
        _report_error("ResultTooLarge", message, ctx, transcript)
        return False
    return True


def _report_error(
    error_type: str, message: str, ctx: _context.UnitContext, transcript: Capture
) -> None:
    ctx.send(m.Error(error_type, message, "", None))
    transcript.write("error", error_type=error_type, message=message, traceback="")


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1
