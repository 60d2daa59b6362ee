"""``UnitInput``: the pipe a unit started with ``stdin=True`` reads as its standard input.

The supervisor holds both ends for the unit's life: each attempt's process
gets the read end as its fd 0 (the zygote passes it on), and ``send_input``
queues bytes for the write end. The supervisor's thread never waits on the
pipe: ``send`` appends to a queue and returns, and a writer thread of this
unit's, started while bytes wait, writes them in order as the command reads
(the write end is non-blocking; the writer polls it with a short timeout, so
it sees ``close`` within that time even when nobody reads). ``eof=True``
closes the write end once everything before it is written: the command reads
end of file. The unit's end closes both ends and drops what is still queued.

``send`` and ``close`` run on the SupervisorActor's thread; the writer thread
only writes and, last, closes the write end (so no descriptor is closed while
another thread may still use its number).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import threading

from workunits._core.errors import SpecError

MAX_QUEUED = 16 << 20  # bytes waiting for a unit that does not read: more is refused
_POLL_MS = 200  # how long the writer waits for room before it looks at ``closed`` again


class UnitInput:
    """One unit's stdin pipe and the bytes queued for it."""

    def __init__(self, work_id: str) -> None:
        self.work_id = work_id
        self.read_fd, self._write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._eof = False  # no more sends: the write end closes once the queue is written
        self._closed = False  # the unit ended: drop the queue, close both ends
        self._writer: threading.Thread | None = None

    def send(self, data: bytes, eof: bool) -> None:
        """Queue ``data`` (then end of file, with ``eof``); SpecError when the unit's
        stdin was closed already or too much waits unread (SupervisorActor's thread)."""
        with self._lock:
            if self._eof or self._closed:
                raise SpecError(
                    f"the stdin of {self.work_id} is closed (eof=True was sent): "
                    "it takes no more input"
                )
            if self._queued + len(data) > MAX_QUEUED:
                raise SpecError(
                    f"{self.work_id} has not read {self._queued} bytes of its stdin yet: "
                    f"at most {MAX_QUEUED} may wait; send the rest once it has read more"
                )
            if data:
                self._queue.append(data)
                self._queued += len(data)
            self._eof = eof
            if self._writer is None:
                if not self._queue:  # nothing to write: only an end of file, now
                    if eof:
                        os.close(self._write_fd)
                    return
                self._writer = threading.Thread(
                    target=self._write_all, name=f"workunits-stdin-{self.work_id}", daemon=True
                )
                self._writer.start()

    def close(self) -> None:
        """The unit ended (SupervisorActor's thread): both ends close; queued bytes are
        dropped. The writer, if one runs, closes the write end within ``_POLL_MS``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._queued = 0
            os.close(self.read_fd)
            # A running writer closes the write end as it leaves; an end of file sent
            # with nothing queued closed it already.
            if self._writer is None and not self._eof:
                os.close(self._write_fd)

    def _write_all(self) -> None:
        """The writer thread: the queue, in order, as the command makes room."""
        fd = self._write_fd
        while True:
            with self._lock:
                if self._closed or not self._queue:
                    self._writer = None
                    if self._closed or self._eof:
                        os.close(fd)
                    return
                chunk = self._queue[0]
            try:
                written = os.write(fd, chunk)
            except BlockingIOError:
                with contextlib.suppress(InterruptedError):
                    poller = select.poll()
                    poller.register(fd, select.POLLOUT)
                    poller.poll(_POLL_MS)
                continue
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                written = len(chunk)  # nobody reads any more: what is left is dropped
                with self._lock:
                    self._queue.clear()
                    self._queued = 0
                continue
            with self._lock:
                if self._queue and self._queue[0] is chunk:
                    self._queued -= written
                    rest = chunk[written:]
                    if rest:
                        self._queue[0] = rest
                    else:
                        self._queue.popleft()
