"""The body of a unit process: set up capture and context, run the callable, report.

Runs in a process the zygote just forked (single-threaded until we start the
capture and channel threads). Returns the exit code; the zygote's child code
calls ``os._exit`` with it, so nothing inherited from the zygote runs at exit.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import socket
import sys
import threading
import traceback
from typing import Any

import cloudpickle
import orjson

from workunits import _strictjson as strictjson
from workunits._runtime import context as _context
from workunits._runtime.transcript import TranscriptWriter
from workunits._wire import frames as m
from workunits._wire.zygote_protocol import SpawnCall

EXIT_OK = 0
EXIT_RAISED = 1


def run_unit(call: SpawnCall, transcript_fd: int, channel_fd: int) -> int:
    transcript = TranscriptWriter(transcript_fd, call.first_seq)
    channel = socket.socket(fileno=channel_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    capture = _capture(transcript)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    checkpoint = None if call.checkpoint is None else orjson.loads(call.checkpoint)
    ctx = _context.UnitContext(
        work_id=call.unit_id,
        kind=call.kind,
        attempt=call.attempt,
        last_checkpoint=checkpoint,
        channel=channel,
        transcript=transcript,
    )
    _context._current = ctx
    transcript.write("start", id=call.unit_id, attempt=call.attempt, pid=os.getpid())
    try:
        code = _run(call, ctx, transcript)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # Point 1 and 2 at /dev/null so the capture pipes see EOF, then let them drain.
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        capture.join(timeout=1.0)
    return code


def _run(call: SpawnCall, ctx: _context.UnitContext, transcript: TranscriptWriter) -> int:
    try:
        fn, args, kwargs = cloudpickle.loads(call.payload)
        value = fn(*args, **kwargs)
    except SystemExit as exc:
        code = _exit_code(exc)
        transcript.write("exit", code=code)
        return code
    except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
        tb = traceback.format_exc()
        ctx.send(m.Error(type(exc).__qualname__, str(exc), tb, _context.pickle_error(exc)))
        transcript.write("error", error_type=type(exc).__qualname__, message=str(exc), traceback=tb)
        return EXIT_RAISED
    return _report_result(value, ctx, transcript)


def _report_result(value: Any, ctx: _context.UnitContext, transcript: TranscriptWriter) -> int:
    data = strictjson.dumps_if_exact(value)
    if data is not None:
        ctx.send(m.Result(data, "json"))
        transcript.write("result", value=value)
        return EXIT_OK
    try:
        blob = bytes(cloudpickle.dumps(value))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result fails the unit, saying so
        message = f"the return value ({type(value).__qualname__}) cannot be pickled: {exc}"
        ctx.send(m.Error("UnpicklableResult", message, "", None))
        transcript.write("error", error_type="UnpicklableResult", message=message, traceback="")
        return EXIT_RAISED
    ctx.send(m.Result(blob, "pickle"))
    transcript.write("result", value=repr(value)[:1000], format="pickle")
    return EXIT_OK


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _capture(transcript: TranscriptWriter) -> threading.Thread:
    """Route fds 1 and 2 through pipes into ``stdout``/``stderr`` transcript events.

    One thread polls both pipes: a thread costs a fresh fork more than a poll does.
    """
    names: dict[int, str] = {}
    # One incremental decoder per stream: a character split across two reads is
    # decoded whole, not as two replacement characters.
    decoders: dict[int, codecs.IncrementalDecoder] = {}
    for target, name in ((1, "stdout"), (2, "stderr")):
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        os.dup2(write_end, target)  # the dup is inheritable: subprocesses write here too
        os.close(write_end)
        names[read_end] = name
        decoders[read_end] = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump() -> None:
        poller = select.poll()
        for fd in names:
            poller.register(fd, select.POLLIN)
        open_fds = set(names)
        while open_fds:
            for fd, _ in poller.poll():
                chunk = os.read(fd, 1 << 16)
                text = decoders[fd].decode(chunk, final=not chunk)
                if text:
                    transcript.write(names[fd], data=text)
                if not chunk:
                    poller.unregister(fd)
                    os.close(fd)
                    open_fds.discard(fd)

    thread = threading.Thread(target=pump, name="workunits-capture", daemon=True)
    thread.start()
    return thread
