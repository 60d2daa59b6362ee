"""Taking a notice: claim it, act, then acknowledge it (or release it for redelivery).

Every mailbox of notices -- the supervisor's own, a ``wu.connect`` client's,
the HTTP API's -- implements ``claim`` and gets the rest from
:class:`NoticeSource`:

- ``with mailbox.take(timeout) as notice: ...`` acknowledges when the block
  exits normally and releases the claim (the notice is delivered again) when
  it raises: exactly-once for a consumer that acknowledges after acting;
- ``mailbox.get(timeout)`` claims and acknowledges at once: at-most-once for
  that consumer (a crash right after loses the notice for it);
- ``mailbox.claim(timeout)`` returns the :class:`Claim`, for a consumer whose
  acknowledgement comes later or from elsewhere.

Each has an async twin that never blocks the event loop (``take_async``,
``get_async``, ``claim_async``, and ``async for notice in mailbox``): the loop
looks for a notice in a short worker-thread call, then sleeps, and parks no
thread while it waits.

A claim lives as long as its consumer's process (or, for a remote consumer,
its renewed lease): a consumer that dies holding one gives the notice back,
and the next consumer sees ``notice.redelivered``.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from workunits._core.errors import ClientClosed, NoNotification, WorkunitsError

if TYPE_CHECKING:
    # Only async callers need it, and they have it loaded: unit processes (which
    # hold mailboxes for their children) are forked without it (see _util.lazy).
    import asyncio

T = TypeVar("T")

ASYNC_POLL = 0.05  # seconds between looks while an async twin waits for a notice


def _settled() -> bool:
    return True


class Claim(Generic[T]):
    """A notice held by one consumer until it acknowledges or releases it.

    ``notice`` is the item: a ``Notification``, or in a supervisor's mailbox a
    ``MonitorEvent``, which is not a notice and whose ack and release do nothing.
    ``ack()`` and ``release()`` return True for the call that settled the
    claim, False when it had already been settled or lost (its lease lapsed,
    and the notice went to another consumer).
    """

    __slots__ = ("_ack", "_lock", "_release", "_renew", "_settled", "notice")

    def __init__(
        self,
        notice: T,
        *,
        ack: Callable[[], bool] = _settled,
        release: Callable[[], bool] = _settled,
        renew: Callable[[float], bool] | None = None,
    ) -> None:
        self.notice = notice
        self._ack = ack
        self._release = release
        self._renew = renew
        self._settled = False
        self._lock = threading.Lock()  # guards _settled; held for O(1) work plus one ledger write

    def __repr__(self) -> str:
        return f"<Claim {self.notice!r}>"

    def ack(self) -> bool:
        """Acknowledge: no consumer in any process receives this notice again."""
        return self._settle(self._ack)

    def release(self) -> bool:
        """Give the notice back: it is delivered again, marked ``redelivered``."""
        return self._settle(self._release)

    def renew(self, lease: float) -> bool:
        """Extend a leased claim by ``lease`` seconds from now; False if it was lost."""
        if self._renew is None:
            return not self._settled  # a process-bound claim needs no renewal
        return self._renew(lease)

    def _settle(self, settle: Callable[[], bool]) -> bool:
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            return settle()


class NoticeSource(abc.ABC, Generic[T]):
    """A mailbox of notices: subclasses say how to ``claim``; taking follows from it."""

    closed_error: ClassVar[type[WorkunitsError]] = ClientClosed  # ends ``async for``

    @abc.abstractmethod
    def claim(self, timeout: float | None = None) -> Claim[T]:
        """Claim the next notice, waiting up to ``timeout`` s (None: forever)."""

    @abc.abstractmethod
    def claim_nowait(self) -> Claim[T] | None:
        """Claim the next notice if one is waiting, else None."""

    def _async_poll(self) -> float:
        """Seconds between looks while ``claim_async`` waits (a client's: its poll)."""
        return ASYNC_POLL

    def get_nowait(self) -> T | None:
        """Take (claim and acknowledge) the next notice if one is waiting, else None."""
        claim = self.claim_nowait()
        if claim is None:
            return None
        claim.ack()
        return claim.notice

    @contextmanager
    def take(self, timeout: float | None = None) -> Iterator[T]:
        """``with take() as notice``: acknowledged if the block succeeds, released if it raises."""
        claim = self.claim(timeout)
        try:
            yield claim.notice
        except BaseException:
            claim.release()
            raise
        claim.ack()

    def get(self, timeout: float | None = None) -> T:
        """Claim and acknowledge the next notice at once (at-most-once for this consumer)."""
        claim = self.claim(timeout)
        claim.ack()
        return claim.notice

    # -- async twins ---------------------------------------------------------------------

    async def claim_async(self, timeout: float | None = None) -> Claim[T]:
        """Like ``claim`` without blocking the event loop.

        A look is a short call in a worker thread (a ledger write, or a request);
        between looks the loop sleeps. A cancelled wait gives back a notice its
        last look claimed, so nothing is held by a consumer that went away.
        """
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            claim = await shielded_look(loop, self.claim_nowait)
            if claim is not None:
                return claim
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise NoNotification(f"no notification within {timeout} s")
            pause = self._async_poll()
            await asyncio.sleep(pause if left is None else min(pause, left))

    async def get_async(self, timeout: float | None = None) -> T:
        """Like ``get`` without blocking the event loop.

        Cancelled, it either leaves the notice to the next consumer (its claim is
        released) or, when its acknowledgement had begun, returns it: never both
        acknowledges a notice and drops it.
        """
        claim = await self.claim_async(timeout)
        return await acked(claim)

    @asynccontextmanager
    async def take_async(self, timeout: float | None = None) -> AsyncIterator[T]:
        """``async with take_async() as notice``: acknowledged if the block succeeds,
        released (delivered again) if it raises or is cancelled."""
        import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

        claim = await self.claim_async(timeout)
        try:
            yield claim.notice
        except BaseException:
            await _finish(asyncio.get_running_loop(), claim.release)
            raise
        # The block has acted: a cancel while this runs must not leave the claim held.
        await _finish(asyncio.get_running_loop(), claim.ack)

    def __aiter__(self) -> AsyncIterator[T]:
        """``async for notice in mailbox``: taken with ``get_async`` until it closes
        (``closed_error``: the client's, or the supervisor's for its own mailbox)."""
        return self._aiter_notices()

    async def _aiter_notices(self) -> AsyncIterator[T]:
        while True:
            try:
                yield await self.get_async()
            except self.closed_error:
                return


async def shielded_look(
    loop: asyncio.AbstractEventLoop, look: Callable[[], Claim[T] | None]
) -> Claim[T] | None:
    """``look()`` in a worker thread; if the waiter is cancelled meanwhile, what it
    claimed is released once the look returns, not left held."""
    import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

    pending = loop.run_in_executor(None, look)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(_release_late)
        raise


def _release_late(done: asyncio.Future[Claim[T] | None]) -> None:
    """Give back what a cancelled look claimed: in a thread of its own (a ledger write
    or a request), since the loop may be closing and its executor gone."""
    if done.cancelled() or done.exception() is not None:
        return
    claim = done.result()
    if claim is not None:
        threading.Thread(target=claim.release, name="workunits-release", daemon=True).start()


async def acked(claim: Claim[T]) -> T:
    """``claim``'s notice, acknowledged in a worker thread (``get_async``'s second half).

    A cancel before the acknowledgement starts releases the claim and is raised;
    a cancel after it started waits for it and returns the notice, so that a
    notice is never acknowledged for a consumer that did not receive it.
    """
    import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

    lock = threading.Lock()
    state = {"started": False, "cancelled": False}

    def ack_unless_cancelled() -> bool:
        with lock:
            if state["cancelled"]:
                return False
            state["started"] = True
        return claim.ack()

    pending = asyncio.get_running_loop().run_in_executor(None, ack_unless_cancelled)
    try:
        await asyncio.shield(pending)
    except asyncio.CancelledError:
        with lock:
            started = state["started"]
            state["cancelled"] = not started
        if not started:  # not acknowledged, nor will it be: the next consumer takes it
            threading.Thread(target=claim.release, name="workunits-release", daemon=True).start()
            raise
        await _wait_out(pending)  # acknowledged, or about to be: this consumer has it
    return claim.notice


async def _finish(loop: asyncio.AbstractEventLoop, settle: Callable[[], bool]) -> None:
    """Run ``settle`` (an ack or a release) in a worker thread to its end, even if the
    awaiting task is cancelled meanwhile (then the cancel is raised once it is done)."""
    import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

    pending = loop.run_in_executor(None, settle)
    try:
        await asyncio.shield(pending)
    except asyncio.CancelledError:
        await _wait_out(pending)
        raise


async def _wait_out(pending: asyncio.Future[bool]) -> None:
    """Await ``pending`` to its end whatever cancels come meanwhile (it is a short
    ledger write or request already running in a worker thread)."""
    import asyncio  # noqa: PLC0415 - see the TYPE_CHECKING import

    while not pending.done():
        try:
            await asyncio.shield(pending)
        except asyncio.CancelledError:
            continue
    pending.result()
