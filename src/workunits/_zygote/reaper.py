"""The Reaper: one thread that waits on every unit's sockets with epoll.

It watches *streams* (each agent's channel, the zygote's control socket, which
reports every unit process's exit): every chunk read is handed to ``on_data``;
end of file calls ``on_close`` and closes the Reaper's copy of the socket. A
stream's owner that could not send everything (the peer is not reading) asks
``when_writable`` to be called back once, when the socket has room again.

Two rules keep one stream's trouble from reaching another:

* The Reaper never blocks on a read. ``socket.recv_fds`` drops its ``flags``
  argument (CPython gh-107898, still so in 3.13), so a ``MSG_DONTWAIT`` passed
  to it is silently a blocking read; ``_receive`` calls ``recvmsg`` itself.
* A stream is named by a key that is never reused, not by its descriptor
  number: once the Reaper closes its copy at end of file, the kernel may hand
  the same number to the next stream watched, and a late ``close_stream`` from
  the first stream's owner must not close the second.

Actors never block on a process or a socket; the Reaper tells them. Callbacks
run in the Reaper thread and must be quick (a pykka ``tell`` is right). What
the callbacks of one wake (one ``epoll`` return) gather -- the ends of several
processes, say -- can travel on as one message: ``after_wake`` runs a
callback once the wake's events are handled.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import logging
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


_CHUNK = 1 << 16
_MAX_FDS = 16  # descriptors taken with one chunk; the kernel closes any beyond
_FD_SIZE = array.array("i").itemsize
_ANCILLARY = socket.CMSG_LEN(_MAX_FDS * _FD_SIZE)


@dataclass(frozen=True, slots=True)
class _Stream:
    key: int  # never reused, unlike the descriptor number
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
        # Invariant: an fd is in _streams iff it is registered with the epoll, and a
        # stream is in _by_key iff it is in _streams.
        self._streams: dict[int, _Stream] = {}
        self._by_key: dict[int, _Stream] = {}
        self._keys = itertools.count(1)
        # One-shot callbacks for streams registered for EPOLLOUT as well.
        self._writable: dict[int, Callable[[], None]] = {}
        # Streams to drain and close, in the Reaper thread.
        self._to_close: deque[_Stream] = deque()
        # Run once the current wake's events are handled (the Reaper thread's only).
        self._after_wake: list[Callable[[], None]] = []
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
        sending on ``sock`` in blocking mode. Returns the stream's key for
        ``when_writable`` and ``close_stream``.
        """
        own = sock.dup()
        fd = own.fileno()
        with self._lock:
            self._check_open()
            stream = _Stream(next(self._keys), own, on_data, on_close)
            self._streams[fd] = self._by_key[stream.key] = stream
            self._epoll.register(fd, select.EPOLLIN)
        return stream.key

    def when_writable(self, key: int, callback: Callable[[], None]) -> bool:
        """Call ``callback`` once, in the Reaper thread, when stream ``key`` can be sent on.

        False (and no callback) when the stream is no longer watched.
        """
        with self._lock:
            stream = self._by_key.get(key)
            if self._closing or stream is None:
                return False
            fd = stream.sock.fileno()
            self._writable[fd] = callback
            self._epoll.modify(fd, select.EPOLLIN | select.EPOLLOUT)
        return True

    def close_stream(self, key: int) -> None:
        """Deliver what the stream still holds, then ``on_close`` and close it (asynchronously).

        Nothing happens when the stream already ended (its peer closed first).
        """
        with self._lock:
            stream = self._by_key.get(key)
            if self._closing or stream is None:
                return
            self._to_close.append(stream)
            self._wake()

    def after_wake(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once every event of the current wake has been handled.

        Only from the Reaper thread (a callback of this wake); a callback that
        raises is logged, as any other.
        """
        if not self.on_its_thread():
            raise RuntimeError("after_wake is for the Reaper thread's own callbacks")
        self._after_wake.append(callback)

    def on_its_thread(self) -> bool:
        """True in the Reaper thread itself (a callback, or what a callback runs)."""
        return threading.current_thread() is self._thread

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
                        self._run_after_wake()  # what this wake gathered still goes on
                        return
                    while self._to_close:
                        self._drain(self._to_close.popleft(), final=True)
                else:
                    # None when an earlier event of this batch ended the stream. The
                    # number may even name a newer stream by now: then this read finds
                    # nothing and returns, as reads never block.
                    stream = self._streams.get(fd)
                    if stream is None:
                        continue
                    if mask & select.EPOLLOUT:
                        self._on_writable(fd)
                    if mask & ~select.EPOLLOUT:
                        self._drain(stream, final=False)
            self._run_after_wake()

    def _run_after_wake(self) -> None:
        while self._after_wake:
            callbacks, self._after_wake = self._after_wake, []
            for callback in callbacks:
                self._call(callback)

    def _on_writable(self, fd: int) -> None:
        with self._lock:
            callback = self._writable.pop(fd, None)
            if fd in self._streams:
                self._epoll.modify(fd, select.EPOLLIN)
        if callback is not None:
            self._call(callback)

    def _drain(self, stream: _Stream, *, final: bool) -> None:
        """Read what ``stream`` holds now: one chunk, or (``final``) all of it, then close it.

        A final drain stops at the first empty read, end of file or not: a copy of
        the peer's end may live on elsewhere, and the Reaper never waits for it.
        """
        fd = stream.sock.fileno()
        if fd < 0 or self._streams.get(fd) is not stream:
            return  # ended already: a close requested after its end of file
        while True:
            fds: list[int] = []
            try:
                data, fds = _receive(stream.sock)
            except BlockingIOError:
                if not final:
                    return
                data = b""
            except OSError:
                data = b""
            if not data:
                with self._lock:
                    del self._streams[fd]
                    del self._by_key[stream.key]
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
        self._by_key.clear()
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One read that never blocks, with the descriptors that came with it (SCM_RIGHTS).

    ``socket.recv_fds(sock, n, maxfds, socket.MSG_DONTWAIT)`` would block:
    it does not pass its flags on (CPython gh-107898).
    """
    data, ancillary, _flags, _addr = sock.recvmsg(_CHUNK, _ANCILLARY, socket.MSG_DONTWAIT)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % _FD_SIZE])
    return data, list(fds)
