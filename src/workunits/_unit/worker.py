"""A pooled worker process: runs units one at a time, each as ``run_unit`` would.

Forked by the zygote like any unit (own session, parent-death signal), then it
loops: receive ``RunUnit`` with the unit's transcript and channel descriptors on
the control socket, run the unit with its own context (``run_unit``), close the
unit's channel, end what the unit left running, put what it and they wrote in
its transcript, put back what a unit commonly changes (cwd, environment,
signal handlers, ``sys.stdout``/``sys.stderr``, ``sys.argv``, ``sys.path``),
report ``UnitDone``, and ready the capture (pipes on fds 1 and 2 and a pump
thread, made once) for the next unit before it comes. What it cannot put
back (module-level state, imported modules, threads a unit left running)
carries over to the next unit: that is what a pooled unit gives up (see the
guide).

A unit that ends the process (``os._exit``, a signal, a kill) ends the worker;
the pool fails that unit only and starts another worker. ``SystemExit`` is a
return, not an exit: ``run_unit`` turns it into the unit's exit code.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from workunits._unit import context as _context
from workunits._unit.capture import Capture
from workunits._unit.child import prepare, run_unit
from workunits._unit.descendants import cgroup_of, end_children, has_children, is_subreaper
from workunits._util import framing
from workunits._wire.pool_protocol import RunUnit, UnitDone
from workunits._wire.zygote_protocol import SpawnCall

EXIT_CONTROL_CLOSED = 0
# ``signal.getsignal`` without its enum lookup: 60-odd calls after every unit.
_raw_getsignal: Callable[[int], Any] = importlib.import_module("_signal").getsignal
_FDS_PER_UNIT = 2


def serve(control_fd: int, quiet_fd: int) -> int:
    """The worker's loop; returns its exit code once the pool closes the control socket.

    ``quiet_fd`` (the pool gives /dev/null) becomes fds 0, 1 and 2; then the units'
    capture takes 1 and 2. It is ready before each unit comes, so what a thread left
    by an earlier unit prints meanwhile goes to the next unit's transcript, as what
    it prints during that unit does.
    """
    for target in (0, 1, 2):
        os.dup2(quiet_fd, target)
    os.close(quiet_fd)
    control = socket.socket(fileno=control_fd)
    reset = _Reset()
    leftovers = _Leftovers()
    reader = framing.FrameReader()
    fds: list[int] = []
    # The units' capture, set up while no unit waits (as a warm process's is): its
    # pipes and pump thread serve unit after unit, and are on no unit's way in.
    capture = prepare(reusable=True)
    while True:
        try:
            data, got, _flags, _addr = socket.recv_fds(control, 1 << 16, 8)
        except OSError:
            return EXIT_CONTROL_CLOSED
        fds.extend(got)
        if not data:
            return EXIT_CONTROL_CLOSED  # the pool (or the supervisor) is gone
        for frame in reader.feed(data):
            if not isinstance(frame, RunUnit) or len(fds) < _FDS_PER_UNIT:
                return EXIT_CONTROL_CLOSED  # not our pool talking: stop rather than guess
            transcript_fd, channel_fd = fds.pop(0), fds.pop(0)
            try:
                code = _run_one(frame.call, transcript_fd, channel_fd, capture)
                leftovers.end_all()  # before UnitDone: the unit's end takes what it started
                capture.unbind()  # what it and its leftovers wrote, in its transcript
            finally:
                os.close(transcript_fd)
            # Before UnitDone too: a signal for the next unit, which the pool hands
            # over at once, must meet the worker's own handlers, not the last unit's.
            reset.restore()
            framing.send(control, UnitDone(frame.call.unit_id, code), plain=True)
            capture = prepare(capture)


def _run_one(call: SpawnCall, transcript_fd: int, channel_fd: int, capture: Capture) -> int:
    ctx: _context.UnitContext | None = None
    try:
        code = run_unit(call, transcript_fd, channel_fd, capture, keep_capture=True)
        ctx = _context._current
    finally:
        _context._current = None
        # Closing the unit's channel is its actor's cue that every frame is in.
        # shutdown first: the context's reader thread may be blocked reading it.
        if ctx is not None:
            ctx.close_channel()
        else:
            with contextlib.suppress(OSError):
                os.close(channel_fd)
    return code


class _Leftovers:
    """The processes a unit started, ended with it (DESIGN §2.9), however they escaped.

    Between units the worker itself is the only process it should have. What
    else is in its cgroup -- when the cgroup is its own, a unit's: in subreaper
    mode it is shared with others and is not looked at -- and every child of
    its (a subreaper's: an escaped orphan comes back here), round by round as
    their orphans come back, is the unit's and is killed.

    The zygote forks the worker from inside the worker's new cgroup and then
    leaves it, so at the worker's start the cgroup may still list the zygote
    (a busy machine delays the zygote's step out). Whose cgroup it is comes
    from the containment mode instead: the zygote makes every unit process a
    subreaper in subreaper mode and none in cgroup mode; and the parent is
    never a stray.
    """

    def __init__(self) -> None:
        self._spare = {os.getpid(), os.getppid()}
        own = None if is_subreaper() else cgroup_of()
        self._cgroup = None if own is None else os.path.join(own, "cgroup.procs")

    def end_all(self) -> None:
        for _ in range(_ROUNDS):
            strays = set() if self._cgroup is None else _pids(self._cgroup) - self._spare
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if not strays and not has_children():
                return  # the common case, asked of the kernel without reading /proc
            # Reaped: their orphans come back here for the next round.
            if not end_children() and not strays:
                return


_ROUNDS = 100  # a fork loop outrunning the kills is still ended within this many


def _pids(procs: str) -> set[int]:
    try:
        with open(procs, encoding="ascii") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


class _Reset:
    """What a worker puts back after each unit, taken when the worker starts."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.argv = list(sys.argv)
        self.path = list(sys.path)
        self.stdout, self.stderr = sys.stdout, sys.stderr
        self.handlers = {
            signum: _raw_getsignal(signum)
            for signum in signal.valid_signals()
            if signum not in (signal.SIGKILL, signal.SIGSTOP)
        }

    def restore(self) -> None:
        with contextlib.suppress(OSError):
            os.chdir(self.cwd)
        _restore_environ(self.environ)
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        sys.stdout, sys.stderr = self.stdout, self.stderr
        for signum, handler in self.handlers.items():
            now = _raw_getsignal(signum)
            if handler is not None and now is not handler and now != handler:
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(signum, handler)


def _restore_environ(saved: dict[str, str]) -> None:
    """Put ``os.environ`` back to ``saved``, writing only what differs: every unit
    changes a few variables (its confinement's), and clearing and rewriting all
    of them cost each unit about a hundred ``os.environ`` calls and ``putenv``s."""
    current = dict(os.environ)
    if current == saved:
        return
    for key in current.keys() - saved.keys():
        del os.environ[key]
    for key, value in saved.items():
        if current.get(key) != value:
            os.environ[key] = value
