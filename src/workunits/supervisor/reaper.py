"""The Reaper: one thread that waits on every unit's pidfd with epoll.

Actors never block on a process; the Reaper tells the owning actor when its
process has exited, and the actor collects the status in its own thread.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Reaper:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._lock = threading.Lock()
        # Invariant: every fd here is registered with the epoll, and nothing else is.
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="workunits-reaper", daemon=True)
        self._thread.start()

    def watch(self, pidfd: int, on_exit: Callable[[], None]) -> None:
        """Call ``on_exit()`` once, from the Reaper thread, when the process behind ``pidfd`` ends.

        The callback must be quick and must not block (a pykka ``tell`` is right).
        """
        with self._lock:
            if self._closing:
                raise RuntimeError("the reaper is closed")
            self._callbacks[pidfd] = on_exit
            self._epoll.register(pidfd, select.EPOLLIN)

    def _run(self) -> None:
        """Runs in the Reaper thread until close()."""
        while True:
            try:
                events = self._epoll.poll()
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            for fd, _mask in events:
                if fd == self._wake_r:
                    return
                with self._lock:
                    callback = self._callbacks.pop(fd, None)
                    if callback is not None:
                        self._epoll.unregister(fd)
                if callback is not None:
                    try:
                        callback()
                    except Exception:
                        log.exception("reaper callback failed for pidfd %d", fd)

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
