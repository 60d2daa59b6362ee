"""``FailedWrites``: ledger writes that failed, kept and retried until they land (invariant 14).

A write can fail for a while: the disk is full (``LedgerFull``), an I/O
error, another process held the lock past the busy timeout (``LedgerError``).
Such a write is never dropped. It waits here, and is retried at every tick
(``retry``) and, at close, until a deadline (``drain``).

Order: one unit's writes land in the order they were made. While a unit has a
write waiting, each later write of that unit queues behind it, even one that
would land now (an end must not land before the ``running`` it follows, and a
retain written after an end must not carry the end in ahead of its queue).
Across units there is no order to keep: one unit's end may land while an
earlier end of another unit still waits. Retries group the waiting ends of
several units into one transaction, as the first attempt did.

A write that no retry can mend (a transition the lifecycle refuses, a unit the
ledger does not know, a damaged ledger) is logged and let go: keeping it would
wedge its unit's queue for ever.

Each distinct failure is logged once, not at every retry, and the backlog says
when it has emptied. Owned by ``LedgerMirror``; every method runs in the
supervisor actor's thread (at close, in its ``on_stop``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from workunits._core.errors import (
    LedgerCorrupt,
    LedgerError,
    LedgerGone,
    LedgerTampered,
    LedgerVersionError,
    NoLedger,
    SessionLost,
    ValueVersionMismatch,
    WorkunitsError,
)
from workunits._core.record import WorkRecord
from workunits._ledger import Ledger, Write, WriteOutcome

log = logging.getLogger(__name__)

MAX_GROUP = 256  # waiting writes of as many units retried in one transaction
# Failures no retry mends: the ledger or a value in it is damaged or foreign.
_FOR_GOOD = (
    LedgerCorrupt,
    LedgerTampered,
    LedgerVersionError,
    NoLedger,
    SessionLost,  # taken over: this session writes nothing more, ever
    ValueVersionMismatch,
)


def retryable(exc: BaseException) -> bool:
    """A failure of the ledger's moment (full, I/O, locked, read-only), not of the write.

    A ledger that is gone (``LedgerGone``) counts as one: what could not be
    written is held in memory, not durable, and said so, for as long as this
    supervisor runs; it never lands, but it is not dropped either.
    """
    if isinstance(exc, LedgerGone):
        return True
    return isinstance(exc, LedgerError) and not isinstance(exc, _FOR_GOOD)


@dataclass(slots=True, eq=False)
class Pending:
    """One write of one unit: fenced ``writes`` in one transaction, or any other ``call``.

    ``done`` runs once the write has landed (or was let go for good), in the
    actor's thread. ``status``: it carries the unit's status, so until it
    lands ``get``/``list`` mark the record not durable. ``key``: a later write
    with the same key, queued right behind it, replaces it (a newer checkpoint).
    """

    work_id: str
    what: str  # for the log: "the end of a1b2c3d4e"
    writes: list[Write] | None = None
    call: Callable[[], object] | None = None
    done: Callable[[], None] | None = None
    # Run after ``done``, and only if the write landed as made: not when it was let go,
    # nor when the ledger refused it as stale (a later attempt owns the unit's row).
    landed: list[Callable[[], None]] = field(default_factory=list)
    status: bool = False
    key: str | None = None


class FailedWrites:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        # Invariant: a unit has a queue here only while it holds a write (never empty).
        self._queues: dict[str, deque[Pending]] = {}
        # Units whose head write is being retried: a write of theirs made meanwhile
        # (by a ``done`` of another unit) queues behind it, as if it were still queued.
        self._in_flight: set[str] = set()
        self._failures: set[str] = set()  # failures logged since the backlog was last empty
        self._dropped: set[str] = set()  # failures of writes not kept, logged since then too
        self._retried = 0  # writes landed on a retry since then

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def holds(self, work_id: str) -> bool:
        return work_id in self._queues or work_id in self._in_flight

    def status_waiting(self, work_id: str) -> bool:
        """A write of the unit's status has not landed yet."""
        queue = self._queues.get(work_id)
        return queue is not None and any(p.status for p in queue)

    def when_status_lands(self, work_id: str, then: Callable[[], None]) -> bool:
        """Call ``then`` once the unit's waiting status write lands (never if it is let go);
        False, and nothing kept, when no status write of the unit waits."""
        queue = self._queues.get(work_id)
        waiting = [p for p in queue or () if p.status]
        if not waiting:
            return False
        waiting[-1].landed.append(then)
        return True

    def waiting(self) -> list[str]:
        """What is waiting, oldest first per unit (for the log at close)."""
        return [p.what for queue in self._queues.values() for p in queue]

    # -- writing ---------------------------------------------------------------

    def submit(self, items: list[Pending]) -> None:
        """Write ``items`` now (their ``writes`` in one transaction), or keep them to retry.

        An item whose unit already holds a write queues behind it without a try.
        """
        fresh = [p for p in items if not self.holds(p.work_id)]
        if len({p.work_id for p in fresh}) == len(fresh) == len(items):
            self._try(fresh)
            return
        for item in items:  # several writes of one unit: in order, one by one
            if self.holds(item.work_id):
                self._queue(item)
            else:
                self._try([item])

    def hold(self, item: Pending) -> None:
        """Queue ``item`` untried, for ``land_held`` later in the same message: writes
        held together land in one transaction (``LedgerMirror.grouping_status``)."""
        self._queue(item)

    def land_held(self, work_ids: list[str]) -> None:
        """Land what waits for these units, in order, as ``retry`` does, in transactions
        of up to ``MAX_GROUP`` units; what fails stays queued for the tick's retry."""
        while True:
            waiting = [w for w in dict.fromkeys(work_ids) if w in self._queues]
            if not waiting:
                return
            if not self._retry_heads([self._queues[w][0] for w in waiting[:MAX_GROUP]]):
                return

    def report(self, exc: BaseException, what: str, *, kept: bool = True) -> None:
        """Log a failed write once per distinct failure, not per retry.

        ``kept``: the write waits here. Otherwise ``what`` says what becomes of it.
        """
        key = f"{type(exc).__name__}: {exc}"
        seen = self._failures if kept else self._dropped
        if key not in seen:
            seen.add(key)
            then = "; it is kept and retried every tick" if kept else ""
            log.error(
                "ledger: could not record %s (%s)%s",
                what,
                exc,
                then,
                extra={"ledger_failure": retryable(exc)},
            )

    def retry(self) -> None:
        """Every tick: land what waits, each unit's writes in order, until the ledger fails."""
        while self._queues:
            if not self._retry_heads([q[0] for q in list(self._queues.values())[:MAX_GROUP]]):
                return
        if self._failures:
            log.warning(
                "ledger: writes land again; the %d kept have landed",
                self._retried,
                extra={"ledger_recovered": True},
            )
            self._failures.clear()
            self._dropped.clear()
            self._retried = 0

    def drain(self, within: float, *, pause: float = 0.1) -> list[str]:
        """At close: retry until nothing waits or ``within`` seconds pass; what is left."""
        deadline = time.monotonic() + within
        while True:
            self.retry()
            now = time.monotonic()
            if not self._queues or now >= deadline:
                return self.waiting()
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, 1.0)

    # -- inside ----------------------------------------------------------------

    def _retry_heads(self, heads: list[Pending]) -> bool:
        """Try queued ``heads`` in front; held meanwhile, so a new write of theirs waits behind."""
        for item in heads:
            self._unqueue(item)
        self._in_flight = {item.work_id for item in heads}
        try:
            return self._try(heads, front=True)
        finally:
            self._in_flight = set()

    def _try(self, items: list[Pending], *, front: bool = False) -> bool:
        """Land ``items`` (one per unit): their writes in one transaction, then each call.

        On a failure worth retrying, every item not landed is queued (at the head
        of its unit's queue when it came from there), the failure is reported,
        and the answer is False.
        """
        finished: set[int] = set()
        try:
            grouped = [p for p in items if p.writes is not None]
            if grouped:
                self._land_writes(grouped, finished)
            for item in items:
                if item.writes is None:
                    self._land_one(item)
                    finished.add(id(item))
        except WorkunitsError as exc:
            rest = [p for p in items if id(p) not in finished]
            for item in rest:
                self._queue(item, front=front)
            self.report(exc, rest[0].what)
            return False
        return True

    def _land_writes(self, items: list[Pending], finished: set[int]) -> None:
        """One transaction for all; if one write is bad for good, one at a time."""
        if len(items) > 1:
            try:
                outcomes = self._ledger.attempts.write_many(
                    [w for p in items for w in p.writes or ()]
                )
            except WorkunitsError as exc:
                if retryable(exc):
                    raise
            except Exception:
                log.debug("ledger: a group of writes failed; one at a time", exc_info=True)
            else:
                stale = _stale(items, outcomes)
                for item in items:
                    self._finished(item, landed=id(item) not in stale)
                    finished.add(id(item))
                return
        for item in items:
            self._land_one(item)
            finished.add(id(item))

    def _land_one(self, item: Pending) -> None:
        """Land one item; raise only a failure worth retrying (others are logged, let go)."""
        landed = False
        try:
            if item.writes is not None:
                landed = not _stale([item], self._ledger.attempts.write_many(item.writes))
            else:
                if item.call is not None:
                    item.call()
                landed = True
        except WorkunitsError as exc:
            if retryable(exc):
                raise
            log.error("ledger: could not record %s, and no retry can: %s", item.what, exc)  # noqa: TRY400 - the message is the cause
        except Exception:
            log.exception("ledger: could not record %s (a bug; it is not retried)", item.what)
        self._finished(item, landed=landed)

    def _finished(self, item: Pending, *, landed: bool) -> None:
        if self._failures:
            self._retried += 1
        completions = [] if item.done is None else [item.done]
        if landed:
            completions += item.landed
        for complete in completions:
            try:
                complete()
            except Exception:  # a bug: it must not cost other writes their landing
                log.exception("supervisor: failed to complete %s", item.what)

    def _queue(self, item: Pending, *, front: bool = False) -> None:
        queue = self._queues.setdefault(item.work_id, deque())
        if front:
            queue.appendleft(item)
        elif queue and item.key is not None and queue[-1].key == item.key:
            queue[-1] = item  # a newer checkpoint replaces the one waiting right before it
        else:
            queue.append(item)

    def _unqueue(self, item: Pending) -> None:
        queue = self._queues[item.work_id]
        queue.popleft()
        if not queue:
            del self._queues[item.work_id]


def _stale(items: list[Pending], outcomes: list[WriteOutcome]) -> set[int]:
    """The items (by ``id``) with a write the ledger refused as stale; each is logged."""
    stale: set[int] = set()
    writes = [(p, w) for p in items for w in p.writes or ()]
    for (item, w), outcome in zip(writes, outcomes, strict=True):
        if outcome is WriteOutcome.STALE:
            log.error("ledger: a write of %s was refused: a later attempt owns it", _id_of(w))
            stale.add(id(item))
    return stale


def _id_of(w: Write) -> str:
    return w.target.id if isinstance(w.target, WorkRecord) else w.target
