"""Mailboxes: where a parent's notifications (and its monitors' events) wait.

A mailbox holds ``MailboxItem``s: one ``Notification`` per child that ends, and
the ``MonitorEvent``s of monitors the parent started, in the order they happened.

A mailbox is a thread-safe queue rather than a pykka actor: a consumer blocks in
``get(timeout)`` and an actor cannot block for it, so an actor mailbox would
need a parked future per waiter and a cancel handshake to avoid dropping a
notice into an abandoned future. The supervisor actor is the only producer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

from workunits._errors import MailboxClosed, NoNotification
from workunits._record import MailboxItem

if TYPE_CHECKING:
    # Only async callers need it, and they have it loaded: unit processes (which
    # hold mailboxes for their children) are forked without it (see _lazy).
    import asyncio

# MailboxClosed lives with the other errors; supervisor/__init__ still imports it from here.
__all__ = ["Mailbox", "MailboxClosed"]


class Mailbox:
    """A parent's notices and monitor events, in order; thread-safe, iterable, async-iterable."""

    def __init__(
        self, owner: str | None, on_take: Callable[[MailboxItem], None] | None = None
    ) -> None:
        """``on_take(item)`` runs in the consumer's thread as each item is taken
        (the root mailbox uses it to mark the notice delivered in the ledger)."""
        self.owner = owner
        self._on_take = on_take
        # Guards _items, _closed and _async_waiters; held for O(1) work (a deque
        # operation, a notify, a threadsafe wake-up per async waiter), never across
        # on_take, which may write the ledger.
        self._cond = threading.Condition()
        self._items: deque[MailboxItem] = deque()
        self._closed = False
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, notice: MailboxItem) -> None:
        """Called from the supervisor actor's thread."""
        with self._cond:
            self._items.append(notice)
            self._cond.notify()
            self._wake_async()

    def close(self) -> None:
        """Wake every waiting consumer with MailboxClosed; the supervisor closes it."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake_async()

    def _wake_async(self) -> None:
        waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    def get(self, timeout: float | None = None) -> MailboxItem:
        """Take the next notice; raise NoNotification (a TimeoutError) after ``timeout`` s.

        Once the supervisor is closed and the queue is empty, raises MailboxClosed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                if self._closed:
                    raise MailboxClosed("the supervisor is closed and the mailbox is empty")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise NoNotification(f"no notification within {timeout} s")
                self._cond.wait(remaining)
            item = self._items.popleft()
        return self._taken(item)

    def _taken(self, item: MailboxItem) -> MailboxItem:
        if self._on_take is not None:
            self._on_take(item)
        return item

    def get_nowait(self) -> MailboxItem | None:
        """The next item if one is waiting, else None."""
        with self._cond:
            item = self._items.popleft() if self._items else None
        return None if item is None else self._taken(item)

    def __iter__(self) -> Iterator[MailboxItem]:
        """Yield notices as they arrive, until the supervisor closes."""
        while True:
            try:
                yield self.get()
            except MailboxClosed:
                return

    async def get_async(self, timeout: float | None = None) -> MailboxItem:
        """Like ``get`` without blocking the event loop."""
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await self._next_async()
        except TimeoutError:
            if not deadline.expired():
                raise  # not our timeout: from the on_take callback
            raise NoNotification(f"no notification within {timeout} s") from None

    async def _next_async(self) -> MailboxItem:
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        while True:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            with self._cond:
                item = self._items.popleft() if self._items else None
                if item is None and self._closed:
                    raise MailboxClosed("the supervisor is closed and the mailbox is empty")
                if item is None:
                    self._async_waiters.append((loop, fut))
            if item is not None:
                return self._taken(item)
            await fut

    def __aiter__(self) -> AsyncIterator[MailboxItem]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[MailboxItem]:
        while True:
            try:
                yield await self.get_async()
            except MailboxClosed:
                return


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
