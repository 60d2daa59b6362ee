"""Mailboxes: where a parent's notifications (and its monitors' events) wait.

A mailbox holds ``MailboxItem``s: one ``Notification`` per child that ends, and
the ``MonitorEvent``s of monitors the parent started, in the order they happened.
Items are taken on the claim/acknowledge contract of ``workunits._core.claim``:
``take``, ``get`` and ``claim``. A notice handed back (``release``, or a
``take`` block that raised) is delivered again, first, marked ``redelivered``.

Notices may also come from a *source*: the application's mailbox claims them
from the ledger's outbox (``source``), so that one consumer in any process
gets each, and the supervisor ``wake``s it when one is written. Monitor events
are never claimed in the ledger: they live only here. Memory is asked first,
and what it holds happened before what the source gives: the supervisor puts
a monitor's events here before it commits the monitor's notice. So items put
while the source was being asked go before the notice it gave, which waits
behind them in memory, claimed (``_in_order``).

A mailbox is a thread-safe queue rather than a pykka actor: a consumer blocks in
``get(timeout)`` and an actor cannot block for it, so an actor mailbox would
need a parked future per waiter and a cancel handshake to avoid dropping a
notice into an abandoned future. The supervisor actor is the only producer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ClassVar

from workunits._core.claim import Claim, NoticeSource, acked, shielded_look
from workunits._core.errors import MailboxClosed, NoNotification, WorkunitsError
from workunits._core.record import MailboxItem, Notification
from workunits._core.seconds import wait_timeout

if TYPE_CHECKING:
    # Only async callers need it, and they have it loaded: unit processes (which
    # hold mailboxes for their children) are forked without it (see _util.lazy).
    import asyncio

# MailboxClosed lives with the other errors; supervisor/__init__ still imports it from here.
__all__ = ["Mailbox", "MailboxClosed"]

Source = Callable[[], "Claim[MailboxItem] | None"]


class Mailbox(NoticeSource[MailboxItem]):
    """A parent's notices and monitor events, in order; thread-safe, iterable, async-iterable."""

    closed_error: ClassVar[type[WorkunitsError]] = MailboxClosed  # ends ``async for``

    def __init__(
        self,
        owner: str | None,
        *,
        on_ack: Callable[[Notification], None] | None = None,
        source: Source | None = None,
        waiting: Callable[[], int] | None = None,
        poll: float = 0.5,
    ) -> None:
        """``on_ack(notice)`` runs in the consumer's thread when a notice held in memory
        is acknowledged (a unit tells its actor, so the ledger records it).

        ``source()`` claims a notice from elsewhere (the ledger) or returns None;
        it is asked when nothing waits in memory, at each ``wake`` and every
        ``poll`` seconds (a consumer elsewhere may hand one back); ``waiting()``
        counts the notices it holds that nobody has claimed.
        """
        self.owner = owner
        self._on_ack = on_ack
        self._source = source
        self._waiting = waiting
        self._poll = poll
        # Guards _items, _closed, _woken and _async_waiters; held for O(1) work (a
        # deque operation, a notify, a threadsafe wake-up per async waiter), never
        # across on_ack or source, which may write the ledger.
        self._cond = threading.Condition()
        # In order. A Claim is a notice already claimed from the source (``_in_order``).
        self._items: deque[MailboxItem | Claim[MailboxItem]] = deque()
        self._closed = False
        self._woken = 0  # wake() calls so far: a waiter re-asks the source when it moves
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __len__(self) -> int:
        """Items waiting: in memory, and the unclaimed notices of the source."""
        with self._cond:
            held = len(self._items)
        return held + (0 if self._waiting is None else self._waiting())

    def put(self, item: MailboxItem) -> None:
        """Called from the supervisor actor's thread (or the unit's reader thread)."""
        with self._cond:
            self._items.append(item)
            self._notify()

    def wake(self) -> None:
        """The source has something new: waiting consumers ask it again."""
        with self._cond:
            self._woken += 1
            self._notify()

    def close(self) -> None:
        """Wake every waiting consumer with MailboxClosed; the supervisor closes it."""
        with self._cond:
            self._closed = True
            self._notify()

    def _notify(self) -> None:
        self._cond.notify_all()
        waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            # A consumer's loop may have closed since it waited (asyncio.run ended):
            # that is its business, never an error for the supervisor that puts.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, fut)

    # -- claiming ------------------------------------------------------------------------

    def claim(self, timeout: float | None = None) -> Claim[MailboxItem]:
        """Claim the next item; NoNotification (a TimeoutError) after ``timeout`` s.

        Once the supervisor is closed and nothing is left, raises MailboxClosed.
        """
        timeout = wait_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                item = self._items.popleft() if self._items else None
                woken, closed = self._woken, self._closed
            if item is not None:
                return self._claim_of(item)
            held = self._from_source()
            if held is not None:
                return self._in_order(held)
            if closed:
                raise MailboxClosed("the supervisor is closed and the mailbox is empty")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise NoNotification(f"no notification within {timeout} s")
            with self._cond:
                if not self._items and not self._closed and self._woken == woken:
                    wait = remaining
                    if self._source is not None:
                        wait = self._poll if wait is None else min(wait, self._poll)
                    self._cond.wait(wait)

    def claim_nowait(self) -> Claim[MailboxItem] | None:
        """Claim the next item if one is waiting, else None."""
        with self._cond:
            item = self._items.popleft() if self._items else None
        if item is not None:
            return self._claim_of(item)
        held = self._from_source()
        return None if held is None else self._in_order(held)

    def _from_source(self) -> Claim[MailboxItem] | None:
        return None if self._source is None else self._source()

    def _in_order(self, held: Claim[MailboxItem]) -> Claim[MailboxItem]:
        """``held``, just claimed from the source, unless items were put while it was asked.

        Those happened first (see the module docstring): the first of them is
        handed out now, and ``held`` waits behind the others, claimed.
        """
        with self._cond:
            if not self._items:
                return held
            self._items.append(held)
            item = self._items.popleft()
        return self._claim_of(item)

    def _claim_of(self, item: MailboxItem | Claim[MailboxItem]) -> Claim[MailboxItem]:
        if isinstance(item, Claim):
            return item  # claimed from the source already
        if not isinstance(item, Notification):
            return Claim(item)  # a monitor event: not a notice, nothing to acknowledge
        notice = item

        def ack() -> bool:
            if self._on_ack is not None:
                self._on_ack(notice)
            return True

        def release() -> bool:
            again = dataclasses.replace(notice, redelivered=True)
            with self._cond:
                self._items.appendleft(again)
                self._notify()
            return True

        return Claim(item, ack=ack, release=release)

    def _forget_waiter(self, fut: asyncio.Future[None]) -> None:
        with self._cond:
            self._async_waiters = [(lp, f) for lp, f in self._async_waiters if f is not fut]

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[MailboxItem]:
        """Yield items as they arrive (each taken with ``get``), until the supervisor closes."""
        while True:
            try:
                yield self.get()
            except MailboxClosed:
                return

    async def get_async(self, timeout: float | None = None) -> MailboxItem:
        """Like ``get`` without blocking the event loop."""
        held = await self.claim_async(timeout)
        if self._source is None:
            held.ack()  # in memory: O(1), or a frame to the unit's actor
            return held.notice
        return await acked(held)  # a ledger write: see acked for a cancel meanwhile

    async def claim_async(self, timeout: float | None = None) -> Claim[MailboxItem]:
        """Like ``claim`` without blocking the event loop."""
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        timeout = wait_timeout(timeout)
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await self._next_async()
        except TimeoutError:
            if not deadline.expired():
                raise  # not our timeout
            raise NoNotification(f"no notification within {timeout} s") from None

    async def _next_async(self) -> Claim[MailboxItem]:
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        while True:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            with self._cond:
                item = self._items.popleft() if self._items else None
                closed = self._closed
                if item is None:
                    self._async_waiters.append((loop, fut))
            if item is not None:
                return self._claim_of(item)
            try:
                if self._source is not None:
                    # A short ledger write; a cancel meanwhile releases what it claimed.
                    held = await shielded_look(loop, self._source)
                    if held is not None:
                        return self._in_order(held)
                if closed:
                    raise MailboxClosed("the supervisor is closed and the mailbox is empty")
                if self._source is None:
                    await fut
                else:
                    # A consumer elsewhere may hand a notice back: look again every poll.
                    await asyncio.wait([fut], timeout=self._poll)
            finally:
                # Returned, timed out, cancelled or polled again: no wake-up is owed to
                # this future any more (a new one is registered for the next wait).
                self._forget_waiter(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
