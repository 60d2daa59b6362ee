"""Process-level cleanup: nothing outlives the supervisor unasked (invariant 10).

On normal exit (atexit) and on SIGINT/SIGTERM/SIGHUP, every live supervisor is
closed, which kills its running work. The signal handlers then chain to the
handlers they replaced, so a program's own handling (KeyboardInterrupt for
SIGINT, the default termination for SIGTERM) still happens. A signal the
program ignores when the first supervisor starts stays ignored.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from types import FrameType
from typing import Protocol


class Closeable(Protocol):
    def close(self) -> None: ...


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Strong references: a supervisor nobody holds any more still has running work,
# which must be killed at exit; close() is what lets go of it (untrack).
_live: set[Closeable] = set()
_previous: dict[int, signal.Handlers | object] = {}
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
        for signum in _SIGNALS:
            current = signal.getsignal(signum)
            # SIG_IGN: the program ignores it (nohup; SIGINT of a background job), so
            # it must not end the work either. None: a handler outside Python that
            # we could not chain to.
            if current is None or current == signal.SIG_IGN:
                continue
            _previous[signum] = signal.signal(signum, _on_signal)


def untrack(obj: Closeable) -> None:
    with _lock:
        _live.discard(obj)


def close_all() -> None:
    with _lock:
        live = list(_live)
    for obj in live:
        obj.close()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        # Die of the same signal, as we would have without us.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
