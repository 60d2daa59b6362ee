"""``OutputStream`` (``Supervisor.stream()``, ``UnitContext.stream()``) and
``AsyncOutputStream`` (``Supervisor.stream_async()``): both hold the unit retained until done.

Each reads through its surface's callbacks: an ask of the supervisor actor, or
a request on a unit's channel. With ``follow=False`` a stream ends once it has
read what was written so far.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal

# A stream has two chunks alive at its peak: the one the caller still holds and
# the next one being read. 256 KiB keeps that well inside DESIGN section 8's
# 2 MiB budget and still catches up on a backlog at over 1 GiB/s.
STREAM_CHUNK = 256 << 10


class OutputStream(Iterator[bytes]):
    """Every byte of a unit's output exactly once, until it is terminal (the caller's thread).

    ``read`` returns the next chunk and the record it was read against;
    ``wait_a_little(delay)`` returns at the unit's end or after ``delay``;
    ``release`` lets go of the retention (without waiting: it may run from a finalizer).
    """

    def __init__(
        self,
        work_id: str,
        poll: float,
        *,
        read: Callable[[], tuple[bytes, WorkRecord]],
        wait_a_little: Callable[[float], None],
        release: Callable[[], None],
        follow: bool = True,
    ) -> None:
        self.id = work_id
        self.follow = follow
        self._poll = poll
        self._read = read
        self._wait_a_little = wait_a_little
        self._release = release
        self._delay = 0.001
        self._open = True

    def __next__(self) -> bytes:
        while self._open:
            data, record = self._read()
            if data:
                self._delay = 0.001
                return data
            if _done(record) or not self.follow:
                break
            # Nothing new yet: wait for the end or for more output, backing off.
            self._wait_a_little(self._delay)
            self._delay = min(self._delay * 2, self._poll)
        self.close()
        raise StopIteration

    def close(self) -> None:
        if self._open:
            self._open = False
            self._release()

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class AsyncOutputStream(AsyncIterator[bytes]):
    """``OutputStream`` for an event loop: the same reads, awaited; the same release.

    ``begin`` is awaited before the first read (the retention, when the
    supervisor had not started yet); ``read`` and ``wait_a_little`` are
    coroutines that never block the loop.
    """

    def __init__(
        self,
        work_id: str,
        poll: float,
        *,
        begin: Callable[[], Awaitable[None]],
        read: Callable[[], Awaitable[tuple[bytes, WorkRecord]]],
        wait_a_little: Callable[[float], Awaitable[None]],
        release: Callable[[], None],
        follow: bool = True,
    ) -> None:
        self.id = work_id
        self.follow = follow
        self._poll = poll
        self._begin: Callable[[], Awaitable[None]] | None = begin
        self._read = read
        self._wait_a_little = wait_a_little
        self._release = release
        self._delay = 0.001
        self._open = True

    async def __anext__(self) -> bytes:
        if self._begin is not None:
            begin, self._begin = self._begin, None
            await begin()
        while self._open:
            data, record = await self._read()
            if data:
                self._delay = 0.001
                return data
            if _done(record) or not self.follow:
                break
            await self._wait_a_little(self._delay)
            self._delay = min(self._delay * 2, self._poll)
        self.close()
        raise StopAsyncIteration

    def close(self) -> None:
        """Stop; lets go of the retention without waiting (safe on the loop)."""
        if self._open:
            self._open = False
            self._release()

    async def aclose(self) -> None:
        """``close()``, awaitable (for ``contextlib.aclosing``)."""
        self.close()

    async def __aenter__(self) -> AsyncOutputStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _done(record: WorkRecord) -> bool:
    """The unit has ended and every byte of its output has been read."""
    return is_terminal(record.status) and record.output_offset >= record.output_bytes
