"""Process-level cleanup: nothing outlives the supervisor unasked (invariant 10).

On normal exit (atexit) and on SIGINT/SIGTERM/SIGHUP, every live supervisor is
closed, which kills its running work -- or, for SIGTERM to a supervisor made
with ``on_sigterm="deploy"``, hands it over to the next supervisor (what
``workunits serve`` does). A signal ignored when the first supervisor starts
stays ignored.

The signal handler does no work: it records the signal and wakes the cleanup
thread through a pipe (one ``os.write``, which needs no lock), then chains to
the handler it replaced, so a program's own handling still happens (a
KeyboardInterrupt for SIGINT, at once, while the cleanup runs beside it). The
closes -- asks with timeouts, joins, locks the interrupted thread may hold --
run on the cleanup thread. Where the replaced handler was the default action,
the handler restores it and the cleanup thread re-raises the signal once the
work is dead, so the process still dies of it. A ``close()`` that finds
another one under way (atexit after a signal) waits for it, so the interpreter
does not exit while the cleanup thread is half-way.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from types import FrameType
from typing import Protocol


class Closeable(Protocol):
    def close(self) -> None: ...

    def close_for_signal(self, signum: int) -> None:
        """``close`` as a terminating signal asks (a supervisor may take SIGTERM as a deploy)."""
        ...


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Strong references: a supervisor nobody holds any more still has running work,
# which must be killed at exit; close() is what lets go of it (untrack).
_live: set[Closeable] = set()
_previous: dict[int, signal.Handlers | object] = {}
# Guards _live and _installed: a set add, discard or copy, O(1) work. Never taken
# in a signal handler (the handler only writes to the wake-up pipe).
_lock = threading.Lock()
_installed: set[str] = set()  # "atexit" and "signals", once each is in place


def track(obj: Closeable, *, signals: bool = True) -> None:
    """Close ``obj`` at interpreter exit and on a terminating signal.

    The atexit hook and the signal handlers are installed once per process, each
    at the first call that wants it: a first supervisor made with ``signals=False``
    must not leave a later one without its signal handlers.
    """
    with _lock:
        _live.add(obj)
        install_atexit = "atexit" not in _installed
        install_signals = (
            signals
            and "signals" not in _installed
            and threading.current_thread() is threading.main_thread()
        )
        if install_atexit:
            _installed.add("atexit")
        if install_signals:
            _installed.add("signals")
    if install_atexit:
        atexit.register(close_all)
    if install_signals:
        _install_signal_handlers()


def untrack(obj: Closeable) -> None:
    with _lock:
        _live.discard(obj)


def close_all(signum: int | None = None) -> None:
    """Close every live supervisor: at exit, or (``signum``) for a terminating signal."""
    with _lock:
        live = list(_live)
    for obj in live:
        if signum is None:
            obj.close()
        else:
            obj.close_for_signal(signum)


class _CleanupThread:
    """Wakes on a byte (the signal number) in its pipe; closes every live supervisor.

    A daemon: it must not keep a program alive, and what it is doing when the
    interpreter exits is finished by the atexit ``close_all`` (a close waits for
    one under way).
    """

    def __init__(self) -> None:
        self._read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self.write_fd, False)
        self._thread = threading.Thread(target=self._run, name="workunits-cleanup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while data := os.read(self._read_fd, 64):
            close_all(data[0])  # the first signal decides how (a deploy, or an end)
            for signum in set(data):
                if _previous.get(signum, signal.SIG_DFL) == signal.SIG_DFL:
                    # The handler restored the default action: die of the signal,
                    # as we would have without us, now that the work is dead.
                    os.kill(os.getpid(), signum)


_cleanup: _CleanupThread | None = None


def _install_signal_handlers() -> None:
    """Main thread only (``signal.signal`` requires it), once per process."""
    global _cleanup  # noqa: PLW0603 - one cleanup thread per process, made here once
    _cleanup = _CleanupThread()
    for signum in _SIGNALS:
        current = signal.getsignal(signum)
        # SIG_IGN: the program ignores it (nohup; SIGINT of a background job), so
        # it must not end the work either. None: a handler outside Python that
        # we could not chain to.
        if current is None or current == signal.SIG_IGN:
            continue
        _previous[signum] = signal.signal(signum, _on_signal)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Runs in the main thread between two bytecodes: O(1), no locks, no waiting."""
    previous = _previous.get(signum, signal.SIG_DFL)
    if previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)  # the cleanup thread re-raises it
    if _cleanup is not None:
        # Full pipe: a wake-up is already pending, and it closes everything.
        with contextlib.suppress(BlockingIOError):
            os.write(_cleanup.write_fd, bytes([signum]))
    if callable(previous):
        previous(signum, frame)
