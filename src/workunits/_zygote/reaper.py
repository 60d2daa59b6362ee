"""The Reaper: one thread that waits on every unit's sockets with epoll.

It watches *streams* (each agent's channel, the zygote's control socket, which
reports every unit process's exit): every chunk read is handed to ``on_data``;
end of file calls ``on_close`` and closes the Reaper's copy of the socket. A
stream's owner that could not send everything (the peer is not reading) asks
``when_writable`` to be called back once, when the socket has room again.

Actors never block on a process or a socket; the Reaper tells them. Callbacks
run in the Reaper thread and must be quick (a pykka ``tell`` is right).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Stream:
    sock: socket.socket  # the Reaper's own duplicate; reads never block (MSG_DONTWAIT)
    on_data: Callable[[bytes, list[int]], None]
    on_close: Callable[[], None]


class Reaper:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        # Guards _streams, _writable, _to_close, _closing and the epoll's registrations.
        # Held for O(1) work only (a dict entry, an epoll_ctl, a non-blocking write to
        # the wake-up pipe); callbacks are always called outside it.
        self._lock = threading.Lock()
        # Invariant: an fd is in _streams iff it is registered with the epoll.
        self._streams: dict[int, _Stream] = {}
        # One-shot callbacks for streams registered for EPOLLOUT as well.
        self._writable: dict[int, Callable[[], None]] = {}
        self._to_close: deque[int] = deque()  # streams to drain and close, in the Reaper thread
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="workunits-reaper", daemon=True)
        self._thread.start()

    def watch_stream(
        self,
        sock: socket.socket,
        on_data: Callable[[bytes, list[int]], None],
        on_close: Callable[[], None],
    ) -> int:
        """Hand every chunk read from ``sock`` to ``on_data``; at EOF call ``on_close``.

        ``on_data(data, fds)`` also gets the descriptors that came with the chunk
        (SCM_RIGHTS) and owns them.

        The Reaper reads from its own duplicate of the socket, so the caller keeps
        sending on ``sock`` in blocking mode. Returns the key for ``close_stream``.
        """
        own = sock.dup()
        fd = own.fileno()
        with self._lock:
            self._check_open()
            self._streams[fd] = _Stream(own, on_data, on_close)
            self._epoll.register(fd, select.EPOLLIN)
        return fd

    def when_writable(self, fd: int, callback: Callable[[], None]) -> bool:
        """Call ``callback`` once, in the Reaper thread, when stream ``fd`` can be sent on.

        False (and no callback) when the stream is no longer watched.
        """
        with self._lock:
            if self._closing or fd not in self._streams:
                return False
            self._writable[fd] = callback
            self._epoll.modify(fd, select.EPOLLIN | select.EPOLLOUT)
        return True

    def close_stream(self, fd: int) -> None:
        """Deliver what the stream still holds, then ``on_close`` and close it (asynchronously)."""
        with self._lock:
            if self._closing:
                return
            self._to_close.append(fd)
            self._wake()

    def _wake(self) -> None:
        """Wake the Reaper thread (lock held; never blocks)."""
        # A full pipe already holds a wake-up the thread has yet to read.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"w")

    def _check_open(self) -> None:
        if self._closing:
            raise RuntimeError("the reaper is closed")

    def _run(self) -> None:
        """Runs in the Reaper thread until close()."""
        while True:
            for fd, mask in self._epoll.poll():
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    if self._closing:
                        return
                    while self._to_close:
                        self._drain(self._to_close.popleft(), final=True)
                else:
                    if mask & select.EPOLLOUT:
                        self._on_writable(fd)
                    if mask & ~select.EPOLLOUT:
                        self._drain(fd, final=False)

    def _on_writable(self, fd: int) -> None:
        with self._lock:
            callback = self._writable.pop(fd, None)
            if fd in self._streams:
                self._epoll.modify(fd, select.EPOLLIN)
        if callback is not None:
            self._call(callback)

    def _drain(self, fd: int, *, final: bool) -> None:
        stream = self._streams.get(fd)
        if stream is None:
            return
        while True:
            fds: list[int] = []
            try:
                data, fds, _flags, _addr = socket.recv_fds(
                    stream.sock, 1 << 16, 16, socket.MSG_DONTWAIT
                )
            except BlockingIOError:
                if not final:
                    return
                data = b""
            except OSError:
                data = b""
            if not data:
                with self._lock:
                    del self._streams[fd]
                    self._writable.pop(fd, None)
                    self._epoll.unregister(fd)
                self._call(stream.on_close)
                stream.sock.close()
                return
            self._call(lambda d=data, f=fds: stream.on_data(d, f))  # type: ignore[misc]
            if not final:
                return

    @staticmethod
    def _call(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("reaper callback %r failed", callback)

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._wake()
        self._thread.join(timeout=5)
        for stream in self._streams.values():
            stream.sock.close()
        self._streams.clear()
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
