"""``Units``: the registry, one ``UnitSlot`` per unit in memory, and the change events.

Owned by the SupervisorActor and used only from its thread. Every write goes
through ``write`` (the registry's one update function), and every change is
told first to the ledger, then to the subscribers: whoever wakes on a change
may tell another process, which reads the ledger, so the row must already say
it. (Waking waiters before the fsync would save ~1-2 ms per kill on this
disk, at the price of that stale read; consistency wins.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import pykka

from workunits._core import ids as _ids
from workunits._core.errors import UnknownKind, UnknownWork
from workunits._core.record import WorkRecord
from workunits._core.status import Status, is_terminal
from workunits._ledger import Ledger
from workunits.supervisor.actor.kinds import Kinds
from workunits.supervisor.actor.ledger_mirror import LedgerMirror
from workunits.supervisor.actor.registry import Change, Registry
from workunits.supervisor.actor.slots import UnitSlot

log = logging.getLogger(__name__)

Subscriber = Callable[[WorkRecord | None, WorkRecord], None]
CheckpointSubscriber = Callable[[str, int, bytes], None]
"""``fn(work_id, attempt, state)``: a checkpoint was saved (``state`` is its JSON)."""


class Units:
    def __init__(self, kinds: Kinds, mirror: LedgerMirror) -> None:
        self.kinds = kinds
        self.registry = Registry()
        self._mirror = mirror
        # Invariant: _slots has exactly the registry's ids (insert and evict change both).
        self._slots: dict[str, UnitSlot] = {}
        # Invariant: the ids in _slots whose record has ``stall_after`` (it never
        # changes), so the per-tick stall check visits those alone, not every unit.
        self._stall_watched: set[str] = set()
        # Per kind: the ids that may hold one of its running places (an actor, or a start
        # waiting for its ``running`` write), so ``running_of`` looks at those, not at
        # every unit in memory (a backlog of thousands behind a concurrency limit made
        # each start cost a pass over all of them). A superset: ``running_of`` drops the
        # ids that no longer hold a place, and ``Starts`` adds one again when it does.
        self._holders: dict[str, set[str]] = {}
        self._subscribers: list[Subscriber] = []
        self._checkpoint_subscribers: list[CheckpointSubscriber] = []
        self._stop_subscribers: list[Callable[[str], None]] = []

    def __contains__(self, work_id: object) -> bool:
        return work_id in self._slots

    # -- in and out of memory ------------------------------------------------------

    def insert(self, record: WorkRecord) -> UnitSlot:
        """Only the registration chokepoint (``Starts.admit``) calls this."""
        self.registry.insert(record)
        slot = self._slots[record.id] = UnitSlot()
        if record.stall_after is not None:
            self._stall_watched.add(record.id)
        self.emit(None, record)
        return slot

    def evict(self, work_id: str) -> None:
        record = self.registry.remove(work_id)
        slot = self._slots.pop(work_id)
        self._stall_watched.discard(work_id)
        self._holders.get(record.kind, set()).discard(work_id)
        if slot.read_fd is not None:
            os.close(slot.read_fd)
        slot.close_input()

    def slot(self, work_id: str) -> UnitSlot | None:
        return self._slots.get(work_id)

    def slots(self) -> Iterator[tuple[str, UnitSlot]]:
        return iter(list(self._slots.items()))

    def stall_watched(self) -> Iterator[tuple[str, UnitSlot]]:
        """The slots of units submitted with ``stall_after`` (a copy: callers may evict)."""
        return iter([(work_id, self._slots[work_id]) for work_id in self._stall_watched])

    def holds_place(self, kind: str, work_id: str) -> None:
        """``work_id`` (of ``kind``) got an actor, or its start waits for its write."""
        self._holders.setdefault(kind, set()).add(work_id)

    def running_of(self, kind: str) -> int:
        """Units of ``kind`` with an actor, or about to get one (their start's write waits)."""
        holders = self._holders.get(kind)
        if not holders:
            return 0
        count = 0
        for work_id in list(holders):
            slot = self._slots.get(work_id)
            if slot is None or (slot.actor is None and not slot.starting):
                holders.discard(work_id)  # it ended, or its start never came
                continue
            if slot.actor is not None or self.registry.get(work_id).status == Status.RUNNING:
                count += 1
        return count

    def tell(self, work_id: str, message: Any) -> bool:
        """Send ``message`` to the unit's actor; False when it has already stopped.

        A dead actor already reported its end, which is queued behind this call.
        """
        slot = self._slots.get(work_id)
        ref = None if slot is None else slot.actor
        if ref is None or not ref.is_alive():
            return False
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            return False
        return True

    # -- the one update function and its change events -------------------------

    def write(self, work_id: str, change: Change) -> tuple[WorkRecord, WorkRecord]:
        old, new = self.registry.update(work_id, change)
        if new is not old:
            self.emit(old, new)
        return old, new

    def emit(self, old: WorkRecord | None, new: WorkRecord) -> None:
        try:
            self._mirror.on_change(old, new, self._slots.get(new.id))  # logs ledger errors
        except Exception:
            log.exception("ledger: failed to mirror the change of %s", new.id)
        self.tell_subscribers(old, new)

    def tell_subscribers(self, old: WorkRecord | None, new: WorkRecord) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(old, new)
            except Exception:
                log.exception("change subscriber %r failed", subscriber)

    def subscribe(self, subscriber: Subscriber) -> None:
        """``subscriber(old, new)`` runs in this thread after every write; it must not block."""
        self._subscribers.append(subscriber)

    def subscribe_checkpoints(self, subscriber: CheckpointSubscriber) -> None:
        """``subscriber(id, attempt, state)`` runs in this thread after each checkpoint is
        saved; it must not block. Checkpoints are not record changes, hence their own list."""
        self._checkpoint_subscribers.append(subscriber)

    def subscribe_stops(self, subscriber: Callable[[str], None]) -> None:
        """``subscriber(id)`` runs in this thread when a unit handed over at a deploy has
        stopped: no end is written or told for it (``endings``); it must not block."""
        self._stop_subscribers.append(subscriber)

    def tell_stopped(self, work_id: str) -> None:
        for subscriber in self._stop_subscribers:
            try:
                subscriber(work_id)
            except Exception:
                log.exception("stop subscriber %r failed", subscriber)

    def tell_checkpoint(self, work_id: str, attempt: int, state: bytes) -> None:
        for subscriber in self._checkpoint_subscribers:
            try:
                subscriber(work_id, attempt, state)
            except Exception:
                log.exception("checkpoint subscriber %r failed", subscriber)

    # -- reads -----------------------------------------------------------------

    def evicted(self, work_id: str) -> bool:
        """Validate ``work_id``; True when only the ledger still knows it (UnknownWork if none).

        A unit of a kind this supervisor has not registered (another supervisor's
        kind, or this one started without its ``kinds=``) is never in memory: the
        ledger answers for it, and once it has ended it is like any evicted unit.
        One that has not ended cannot be ended here (kill, cancel): UnknownKind,
        saying what to register.
        """
        if self._routable(work_id):
            if work_id in self.registry:
                return False
            self._mirror.get(work_id)
            return True
        record = self._unroutable(work_id)
        if not is_terminal(record.status):
            letter = work_id[0]
            raise UnknownKind(
                f"{work_id} is a {record.kind} unit, and no kind is registered for its "
                f"prefix {letter!r} in this supervisor, so it cannot end it: register the "
                f"kind here (Supervisor(kinds={{{letter!r}: ...}}), or "
                f"register_kind({letter!r}, ...)) and try again"
            )
        return True

    def _routable(self, work_id: str) -> bool:
        """Validate ``work_id``; True when a kind of this supervisor has its prefix."""
        try:
            _ids.prefix_of(work_id, self.kinds)
        except UnknownKind:
            return False
        return True

    def _unroutable(self, work_id: str) -> WorkRecord:
        """The ledger's record of a unit whose prefix no kind here has (UnknownKind if none)."""
        try:
            return self._mirror.get(work_id)
        except UnknownWork:
            prefix = work_id[0]
            raise UnknownKind(
                f"{work_id!r} has prefix {prefix!r}, which no kind is registered for, "
                f"and no unit of the ledger has that ID"
            ) from None

    def lookup(self, work_id: str) -> WorkRecord:
        """The record in memory; UnknownWork (saying so) for one only the ledger still has."""
        if self.evicted(work_id):
            raise UnknownWork(
                f"{work_id} ended and has left memory: get() reads it from the ledger, "
                f"with its output tail; there is no live output or retention left to use"
            )
        return self.registry.get(work_id)

    def get(self, work_id: str) -> WorkRecord:
        """From memory, or from the ledger once the record was evicted (or never loaded).

        The ledger also answers for a unit whose kind this supervisor has not
        registered, as it does for a ``wu.connect`` client.
        """
        if not self._routable(work_id):
            return self._unroutable(work_id)
        found = self.registry.find(work_id)
        return found if found is not None else self._mirror.get(work_id)

    @property
    def ledger(self) -> Ledger:
        """The ledger memory mirrors (for reads: ``pages``)."""
        return self._mirror.ledger

    def kind_name(self, kind: str) -> str:
        """The name of a kind given by letter or name: one of this supervisor's, else
        one the ledger's units have (a kind this supervisor has not registered)."""
        try:
            return self.kinds.actor_class(self.kinds.letter_of(kind)).kind
        except UnknownKind:
            if self._mirror.ledger.units.list(kind=kind, limit=1):
                return kind
            raise
