"""Following units through the ledger from another process: output bytes and root notices.

Everything here runs in the caller's thread and talks only to the ledger and
the state dir's files, never to a supervisor: a client may follow a unit
whether a supervisor runs or not. Waiting is a timed wait that starts short
and backs off (:class:`Backoff`), never a busy loop, and a closed client ends
every wait at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final, TypeVar

from workunits._client.other_host_output import OtherHostOutput
from workunits._core.claim import Claim, NoticeSource
from workunits._core.errors import ClientClosed, LedgerError, NoNotification
from workunits._core.record import Notification
from workunits._core.seconds import seconds, wait_timeout
from workunits._core.status import is_terminal
from workunits._ledger import Ledger, UnitRow
from workunits._ledger.settle import transient
from workunits._util import outputfile

# Two chunks alive at a time (the caller's and the next) keeps memory flat
# however much a unit writes, and still catches up on a backlog quickly.
STREAM_CHUNK = 256 << 10
FIRST_DELAY = 0.002

T = TypeVar("T")


class Backoff:
    """Timed waits that start at ``FIRST_DELAY`` and double up to ``cap`` seconds.

    ``reset()`` after progress, so a busy unit is re-read soon and an idle one
    costs a query every ``cap`` seconds. ``stop`` (the client's closed event)
    cuts any wait short.
    """

    def __init__(self, stop: threading.Event, cap: float) -> None:
        self._stop = stop
        self._cap = cap
        self._delay = FIRST_DELAY

    def reset(self) -> None:
        self._delay = FIRST_DELAY

    def pause(self, deadline: float | None = None) -> None:
        """Wait the current delay (never past ``deadline``, a ``time.monotonic()``)."""
        if self._stop.wait(self.next_delay(deadline)):
            raise ClientClosed("the client is closed")

    async def pause_async(self, deadline: float | None = None) -> None:
        """``pause`` on an event loop: an ``asyncio.sleep``, no thread.

        A close from another thread is seen when the sleep ends (at most ``cap``).
        """
        await asyncio.sleep(self.next_delay(deadline))
        if self._stop.is_set():
            raise ClientClosed("the client is closed")

    def next_delay(self, deadline: float | None = None) -> float:
        """The delay to wait now (ClientClosed once closed); the next one doubles."""
        if self._stop.is_set():
            raise ClientClosed("the client is closed")
        delay = self._delay
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        self._delay = min(self._delay * 2, self._cap)
        return delay


RECONNECT_WITHIN: Final = 30.0
"""Seconds a client's read, wait or take keeps trying a ledger it cannot reach (a
PostgreSQL restart or failover, a full pool) before it raises the ledger's error."""


class Outage:
    """A client's patience with a ledger that is away for a moment.

    ``call(fn)`` runs ``fn``, and while it fails for the ledger's moment (it
    cannot be reached, a lock is held too long: ``settle.transient``) runs it
    again after a pause that starts short and doubles to a second, for up to
    ``within`` seconds from the first failure; then the last error is raised.
    What is retried are reads, claims and acknowledgements: a failed one wrote
    nothing, or was settled by reading back. A closed client stops at once.
    """

    def __init__(self, within: float, stop: threading.Event) -> None:
        self.within = seconds("reconnect_within", within, zero=True)
        self._stop = stop

    def call(self, fn: Callable[[], T]) -> T:
        deadline: float | None = None
        pause = FIRST_DELAY * 25
        while True:
            try:
                return fn()
            except LedgerError as exc:
                if self._stop.is_set():
                    raise ClientClosed("the client is closed") from None
                if not transient(exc):
                    raise
                now = time.monotonic()
                deadline = now + self.within if deadline is None else deadline
                if now + pause > deadline:
                    raise
            if self._stop.wait(pause):
                raise ClientClosed("the client is closed")
            pause = min(pause * 2, 1.0)


class LedgerOutputStream(Iterator[bytes]):
    """Every byte of one unit's output, once, in order, until the unit is terminal.

    With ``follow=False`` it ends as soon as it has read what is there now.

    The read offset is this stream's own: other readers (the supervisor's
    ``read_output``, other clients) do not move it. Sources, in order of
    preference: an agent's transcript (``transcripts/<id>.jsonl``, kept after
    the end) or a shell's log (``transcripts/<id>.log``, the log or a symlink
    to the caller's), the live output file at ``row.output_path`` (kept open,
    so its removal at the end does not cut the read short), and once the file
    is gone before it was ever opened, the ``output_tail`` the terminal write
    stored (the last 64 KiB; what came before it is no longer anywhere).
    """

    def __init__(
        self,
        ledger: Ledger,
        work_id: str,
        *,
        stop: threading.Event,
        poll: float,
        follow: bool = True,
        chunk: int = STREAM_CHUNK,
        other_host: OtherHostOutput | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.id = work_id
        self._outage = outage or Outage(0.0, stop)
        self.follow = follow
        self.offset = 0
        self._ledger = ledger
        # Names that outlive the unit: read from the start, never replaced.
        self._kept = outputfile.kept_paths(ledger.state_dir, work_id)
        self._backoff = Backoff(stop, poll)
        self._chunk = chunk
        self._fd: int | None = None
        self._path: str | None = None
        self._open = True
        # Live output on another host comes through its supervisor (``_client.other_host_output``).
        self._other_host = other_host

    def __next__(self) -> bytes:
        while (data := self.look()) is None:
            self._backoff.pause()
        if not data:
            raise StopIteration
        return data

    def look(self) -> bytes | None:
        """One look, no waiting: the next chunk, ``b""`` at the end, None when nothing
        is there yet (the caller waits, then looks again). Reads the ledger and a file."""
        if not self._open:
            return b""
        row = self._outage.call(lambda: self._ledger.units.require(self.id))
        # The status is read before the file: output read after a terminal
        # row has been seen is all the output there will be.
        ended = is_terminal(row.status)
        data = self._read(row, ended)
        if data:
            self._backoff.reset()
            return data
        if ended:
            rest = self._rest_from_tail(row)
            self.close()
            return rest
        if not self.follow:
            self.close()  # what was there now has been read
            return b""
        return None

    async def look_async(self) -> bytes | None:
        """``look`` on a worker thread (it reads SQLite and a file)."""
        return await asyncio.to_thread(self.look)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[bytes]:
        """``async for``: each look on a worker thread, each wait an ``asyncio.sleep``."""
        while True:
            data = await self.look_async()
            if data is None:
                await self._backoff.pause_async()
            elif data:
                yield data
            else:
                return

    def _read(self, row: UnitRow, ended: bool) -> bytes:
        if self._fd is None:
            self._open_source(row)
            if self._fd is None:
                # Not on this host: a running unit of another host is read through
                # its supervisor; an ended one's tail comes from the ledger.
                url = None if ended or self._other_host is None else self._other_host.url_for(row)
                return b"" if url is None else self._read_elsewhere(url)
        limit = self._chunk
        if ended and self._path == self._kept[1]:
            # A caller's log is theirs to write on: nothing past the unit's own bytes.
            limit = max(0, min(limit, row.output_bytes - self.offset))
        data = outputfile.read_delta(self._fd, self.offset, limit) if limit else b""
        if not data and not ended and self._replaced():
            # A restarted shell attempt writes a fresh file at the same path.
            self._close_fd()
            self.offset = 0
            return self._read(row, ended)
        self.offset += len(data)
        return data

    def _open_source(self, row: UnitRow) -> None:
        for path in (*self._kept, row.output_path):
            if path is None:
                continue
            fd = outputfile.open_for_reading(path)
            if fd is not None:
                self._fd, self._path = fd, path
                return

    def _read_elsewhere(self, url: str) -> bytes:
        """A running unit of another state dir: through its supervisor's HTTP API."""
        assert self._other_host is not None
        data = self._other_host.read(url, self.id, self.offset, self._chunk)
        self.offset += len(data)
        return data

    def _replaced(self) -> bool:
        assert self._fd is not None
        assert self._path is not None
        if self._path in self._kept:
            return False  # transcripts and logs are appended to across attempts, never replaced
        try:
            now = os.stat(self._path)
        except FileNotFoundError:
            return False  # removed at the end; the open descriptor still reads it
        mine = os.fstat(self._fd)
        return (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino)

    def _rest_from_tail(self, row: UnitRow) -> bytes:
        if self._fd is not None:
            return b""  # the file itself was read to its end
        tail = row.output_tail
        start = row.output_bytes - len(tail)
        skip = max(0, self.offset - start)
        rest = tail[skip:]
        self.offset = max(self.offset, start) + len(rest)
        return rest

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._path = None

    def close(self) -> None:
        """Stop following; the next ``next()`` ends the iteration. Idempotent."""
        self._open = False
        self._close_fd()

    def __enter__(self) -> LedgerOutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class LedgerNotices(NoticeSource[Notification], Iterator[Notification]):
    """Notices of top-level units (no parent) from the ledger's outbox.

    Each notice is claimed in the ledger before it is returned, so it goes to
    one consumer at a time across every client and process on the state dir
    (see ``workunits._core.claim`` for take / get / claim). Iteration takes with
    ``get`` and ends when the client closes.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        stop: threading.Event,
        poll: float,
        outage: Outage | None = None,
    ) -> None:
        self._ledger = ledger
        self._stop = stop
        self._poll = poll
        self._outage = outage or Outage(0.0, stop)

    def _async_poll(self) -> float:
        return self._poll

    def claim_nowait(self) -> Claim[Notification] | None:
        """Claim the next notice if one is waiting, else None; ClientClosed once closed."""
        if self._stop.is_set():
            raise ClientClosed("the client is closed")
        try:
            held = self._outage.call(lambda: self._ledger.outbox.claim(None))
        except LedgerError:
            # close() from another thread closes the ledger under us: that is
            # the client closing, not a broken ledger.
            if self._stop.is_set():
                raise ClientClosed("the client is closed") from None
            raise
        if held is None:
            return None
        work_id, token = held.notice.id, held.token
        return Claim(
            held.notice,
            ack=lambda: self._outage.call(lambda: self._ledger.outbox.ack(work_id, token)),
            release=lambda: self._outage.call(lambda: self._ledger.outbox.release(work_id, token)),
        )

    def claim(self, timeout: float | None = None) -> Claim[Notification]:
        """The next notice, claimed; NoNotification (a TimeoutError) after ``timeout`` s,
        ClientClosed once closed."""
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff(self._stop, self._poll)
        while True:
            claim = self.claim_nowait()
            if claim is not None:
                return claim
            if deadline is not None and time.monotonic() >= deadline:
                raise NoNotification(f"no notification within {timeout} s")
            backoff.pause(deadline)

    def __next__(self) -> Notification:
        try:
            return self.get()
        except ClientClosed:
            raise StopIteration from None
