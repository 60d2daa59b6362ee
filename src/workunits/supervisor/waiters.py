"""Waiters for terminal records, fed by the supervisor's change events.

``wait`` registers before it reads the current record, so a terminal write
that lands between the two is never missed.

The read is an ask to the supervisor actor (a round trip between threads per
wait), which the change events make unnecessary for a unit this process
started and that has not ended yet: its insert was told here (``None`` ->
``pending``) and its end will be. ``add`` says so, under the lock the end's
event takes, so a wait may go straight to waiting: the end, if it comes
later, wakes it; if it came already, the unit is no longer in ``_unended``
and the wait reads the record as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from workunits._core.errors import SupervisorClosed
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    record: WorkRecord | None = None
    callback: Callable[[WorkRecord], None] | None = None
    # Known not ended when added (see the module docstring): no need to read the record.
    unended: bool = False
    # Called (after ``event`` is set, with no record) if the supervisor closes first.
    on_close: Callable[[], None] | None = None
    # Also woken (with no record) when the unit stops handed over at a deploy: a
    # deploy's close waits for its units to stop, ended or not.
    stops_too: bool = False


def settled(record: WorkRecord) -> bool:
    """The record is terminal and its end is in the ledger: a wait may return it.

    A terminal record that is not ``durable`` (its end waits to be written) is
    not: waiters are woken only when the end lands (invariant 14).
    """
    return is_terminal(record.status) and record.durable


class TerminalWaiters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, list[Waiter]] = {}
        # Units whose insert was told here and whose end was not (yet): not settled.
        self._unended: set[str] = set()
        self._closed = False

    def on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        """Change subscriber; runs in the supervisor actor's thread and must not block."""
        if not is_terminal(new.status):
            if old is None:  # a unit entered memory, not ended
                with self._lock:
                    if not self._closed:
                        self._unended.add(new.id)
            return
        if old is not None and is_terminal(old.status):
            return
        with self._lock:
            self._unended.discard(new.id)
            waiters = self._waiters.pop(new.id, [])
        for waiter in waiters:
            waiter.record = new
            waiter.event.set()
            if waiter.callback is not None:
                # The waiters were popped: one callback that raised must not
                # leave the others unwoken for ever.
                try:
                    waiter.callback(new)
                except Exception:
                    log.exception("a waiter of %s could not be woken", new.id)

    def on_stopped(self, work_id: str) -> None:
        """Stop subscriber: ``work_id`` stopped, handed over at a deploy (no end to tell).

        Wakes only the waiters that asked for it (``stops_too``): a wait for an
        end must not take a hand-over for one. Actor's thread; does not block.
        """
        with self._lock:
            waiters = self._waiters.get(work_id, [])
            woken = [w for w in waiters if w.stops_too]
            if woken:
                kept = [w for w in waiters if not w.stops_too]
                if kept:
                    self._waiters[work_id] = kept
                else:
                    del self._waiters[work_id]
        for waiter in woken:
            waiter.event.set()

    def add(
        self,
        work_id: str,
        callback: Callable[[WorkRecord], None] | None = None,
        on_close: Callable[[], None] | None = None,
        *,
        stops_too: bool = False,
    ) -> Waiter:
        waiter = Waiter(callback=callback, on_close=on_close, stops_too=stops_too)
        with self._lock:
            self._waiters.setdefault(work_id, []).append(waiter)
            waiter.unended = work_id in self._unended
        return waiter

    def close(self) -> None:
        """The supervisor stopped: no end will be told any more; waits read (and learn so).

        Waits still waiting are woken without a record: a unit a deploy left
        for the next session has not ended, and never will in this process.
        """
        with self._lock:
            self._closed = True
            self._unended.clear()
            waiters = [w for ws in self._waiters.values() for w in ws]
            self._waiters.clear()
        for waiter in waiters:
            waiter.event.set()
            if waiter.on_close is not None:
                waiter.on_close()

    def discard(self, work_id: str, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(work_id)
            if waiters and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[work_id]

    def add_async(self, work_id: str) -> tuple[Waiter, asyncio.Future[WorkRecord]]:
        """A waiter that resolves an asyncio future on the caller's loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[WorkRecord] = loop.create_future()

        def resolve(record: WorkRecord) -> None:
            # A loop closed with the wait still on it has nobody left to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set, fut, record)

        def closed() -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_fail, fut)

        return self.add(work_id, resolve, closed), fut

    def wait_a_little(self, work_id: str, delay: float, get: Callable[[str], WorkRecord]) -> None:
        """Wait up to ``delay`` for the unit to end (a quiet stream: more output may come
        sooner). ``get`` reads its record after the waiter is in place."""
        waiter = self.add(work_id)
        try:
            if not is_terminal(get(work_id).status):
                waiter.event.wait(delay)
        finally:
            self.discard(work_id, waiter)

    async def wait_a_little_async(
        self, work_id: str, delay: float, get: Callable[[str], Awaitable[WorkRecord]]
    ) -> None:
        """``wait_a_little`` on an event loop: no thread waits."""
        waiter, fut = self.add_async(work_id)
        try:
            if not is_terminal((await get(work_id)).status):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await fut
        finally:
            self.discard(work_id, waiter)


def _set(fut: asyncio.Future[WorkRecord], record: WorkRecord) -> None:
    if not fut.done():
        fut.set_result(record)


def _fail(fut: asyncio.Future[WorkRecord]) -> None:
    if not fut.done():
        fut.set_exception(SupervisorClosed("the supervisor closed before the unit ended"))
