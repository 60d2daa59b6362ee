"""``Eviction``: when an ended unit's record leaves memory (DESIGN invariant 8).

Owned by the SupervisorActor; every method runs in its thread. A record
leaves memory only when it is terminal, its grace (``evict_after``) is over,
no reader of this process holds it, no retain lease in the ledger holds it,
and its notice has been acknowledged -- unless nobody is left to acknowledge
it here: its parent has ended, or it was submitted through the ledger by a
client, whose notices are read from the ledger.

The mailbox decides: an unacknowledged notice keeps the record. So that a
daemon where nobody consumes does not grow without bound, at most
``max_resident`` ended records stay, the oldest leaving first. Every read of
an evicted unit is answered from the ledger.

Acknowledgements made in this process arrive as ``acknowledged``; those made
by other processes (a client, the HTTP API) are read from the ledger when a
record's eviction comes due, and again every ``RECHECK`` seconds while it
stays.
"""

from __future__ import annotations

from dataclasses import replace

from workunits._core.clock import Clock
from workunits._core.record import WorkRecord
from workunits._core.status import is_terminal
from workunits._ledger import Ledger
from workunits.supervisor.actor.deadlines import Deadlines, Due
from workunits.supervisor.actor.notices import Notices
from workunits.supervisor.actor.units import Units

# -- the rule (invariant 8): its one home ---------------------------------------


def past_grace(record: WorkRecord, now: float) -> bool:
    """Whether a record is one eviction considers: terminal, held by no reader of this
    process, and past ``evict_after``. What its notice says is ``evictable``'s part."""
    return (
        is_terminal(record.status)
        and record.retain == 0
        and record.evict_after is not None
        and record.evict_after <= now
    )


def evictable(record: WorkRecord, now: float, *, gated: bool) -> bool:
    """Whether a record may leave memory (invariant 8), leases aside.

    Only when it is terminal, past ``evict_after``, held by no reader of this
    process, and -- when ``gated`` (its notice is for a consumer that may still
    come for it: the application, or a parent in memory) -- acknowledged. The
    caller then asks the ledger whether a retain lease still holds it.
    """
    return past_grace(record, now) and record.notified and (record.acknowledged or not gated)


RECHECK = 5.0  # seconds before a record kept by its notice or a lease is looked at again
DEFAULT_MAX_RESIDENT_ENDED = 10_000


class Eviction:
    def __init__(
        self,
        *,
        units: Units,
        notices: Notices,
        ledger: Ledger,
        deadlines: Deadlines,
        clock: Clock,
        max_resident: int = DEFAULT_MAX_RESIDENT_ENDED,
    ) -> None:
        self._units = units
        self._notices = notices
        self._ledger = ledger
        self._deadlines = deadlines
        self._clock = clock
        self._max_resident = max_resident
        # Ended records in memory, oldest end first: the order the cap evicts in.
        # Invariant: exactly the terminal records of the registry.
        self._ended: dict[str, None] = {}

    # -- what the rest of the supervisor tells it ---------------------------------------

    def ended(self, record: WorkRecord) -> None:
        """After a unit's end is durable: remember its order; its children's notices
        can no longer be taken by it, so they count as acknowledged."""
        self._ended[record.id] = None
        for child in self._units.registry.children(record.id):
            found = self._units.registry.find(child)
            if found is not None and is_terminal(found.status):
                self.acknowledged(child)

    def acknowledged(self, work_id: str) -> None:
        """The unit's notice was acknowledged (in this process, or found so in the ledger)."""
        record = self._units.registry.find(work_id)
        if record is None or record.acknowledged:
            return
        _, new = self._units.write(work_id, lambda r: replace(r, acknowledged=True))
        if new.evict_after is not None:
            self._deadlines.push(new.evict_after, work_id, Due.EVICT)

    def released(self, work_id: str) -> None:
        """A retain lease on the unit ended: look at it again now."""
        record = self._units.registry.find(work_id)
        if record is not None and record.evict_after is not None:
            self._deadlines.push(self._clock.now(), work_id, Due.EVICT)

    # -- the decision ----------------------------------------------------------------

    def gated(self, record: WorkRecord) -> bool:
        """Whether the record must wait for its notice to be acknowledged."""
        slot = self._units.slot(record.id)
        if slot is not None and slot.adopted:
            return False  # submitted by a client: its notices are read from the ledger
        if record.parent is None:
            return True  # the application's: it takes them from sup.notifications()
        parent = self._units.registry.find(record.parent)
        return parent is not None and not is_terminal(parent.status)

    def run(self, due: list[str], now: float) -> int:
        """Evict the due records that may leave (``due``: their EVICT deadlines came); count."""
        candidates = [
            r
            for r in (self._units.registry.find(work_id) for work_id in dict.fromkeys(due))
            if r is not None and past_grace(r, now)
        ]
        waiting = [r.id for r in candidates if not r.acknowledged and self.gated(r)]
        if waiting:
            for work_id in self._ledger.outbox.acknowledged_among(waiting):
                self.acknowledged(work_id)
        ready = []
        for candidate in candidates:
            record = self._units.registry.get(candidate.id)
            if evictable(record, now, gated=self.gated(record)):
                ready.append(record.id)
            else:
                self._deadlines.push(now + RECHECK, record.id, Due.EVICT)
        leased = self._ledger.retains.held(ready) if ready else set()
        for work_id in leased:
            self._deadlines.push(now + RECHECK, work_id, Due.EVICT)
        evicted = [work_id for work_id in ready if work_id not in leased]
        for work_id in evicted:
            self._evict(work_id)
        return len(evicted) + self._cap()

    def _cap(self) -> int:
        """Past ``max_resident`` ended records, the oldest leave whatever their notice says."""
        over = len(self._ended) - self._max_resident
        if over <= 0:
            return 0
        oldest = []
        for work_id in self._ended:
            record = self._units.registry.find(work_id)
            if record is not None and record.retain == 0:
                oldest.append(work_id)
            if len(oldest) == over:
                break
        leased = self._ledger.retains.held(oldest)
        evicted = [work_id for work_id in oldest if work_id not in leased]
        for work_id in evicted:
            self._evict(work_id)
        return len(evicted)

    def _evict(self, work_id: str) -> None:
        record = self._units.registry.get(work_id)
        if record.output_offset:
            # The read offset goes with the record: a later read_output from the
            # ledger's tail carries on from it.
            self._ledger.units.save_output_offset(work_id, record.output_offset)
        self._units.evict(work_id)
        self._notices.forget(work_id)
        self._ended.pop(work_id, None)

    def resident_ended(self) -> int:
        return len(self._ended)
