"""Waiters for terminal records, fed by the supervisor's change events.

``wait`` registers before it reads the current record, so a terminal write
that lands between the two is never missed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from workunits._record import WorkRecord
from workunits._status import is_terminal


@dataclass(eq=False)
class Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    record: WorkRecord | None = None
    callback: Callable[[WorkRecord], None] | None = None


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

    def on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        """Change subscriber; runs in the supervisor actor's thread and must not block."""
        if not is_terminal(new.status) or (old is not None and is_terminal(old.status)):
            return
        with self._lock:
            waiters = self._waiters.pop(new.id, [])
        for waiter in waiters:
            waiter.record = new
            waiter.event.set()
            if waiter.callback is not None:
                waiter.callback(new)

    def add(self, work_id: str, callback: Callable[[WorkRecord], None] | None = None) -> Waiter:
        waiter = Waiter(callback=callback)
        with self._lock:
            self._waiters.setdefault(work_id, []).append(waiter)
        return waiter

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
            loop.call_soon_threadsafe(_set, fut, record)

        return self.add(work_id, resolve), fut


def _set(fut: asyncio.Future[WorkRecord], record: WorkRecord) -> None:
    if not fut.done():
        fut.set_result(record)
