"""``LedgerMirror``: what the supervisor writes to the ledger, and the reads that outlive memory.

Owned by the SupervisorActor; every method runs in its thread, which is the
ledger's only writer of unit rows (DESIGN §6). What the ledger brings in
(dead sessions' units, other processes' submits and requests) is
``supervisor.recovery``'s.

- Submits and terminal writes are fully synced; the terminal write and its
  outbox notice commit together (invariant 11). Pids and progress are grouped
  per tick.
- Writes carry the attempt; the ledger refuses a stale one (invariant 13).
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import Any

from workunits._clock import Clock
from workunits._errors import LedgerError, UnknownWork, WorkunitsError
from workunits._ledger import Ledger, NewUnit, UnitRow, Write, WriteOutcome
from workunits._record import Notification, WorkRecord
from workunits._restart import UNBOUNDED_ATTEMPTS
from workunits._status import Status, is_terminal
from workunits.actors.base import WorkActor
from workunits.supervisor.slots import Slot

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0
EXPIRE_EVERY = 60.0


class LedgerMirror:
    def __init__(self, ledger: Ledger, session: str, clock: Clock) -> None:
        self.ledger = ledger
        self.session = session
        self._clock = clock
        # Slots holding a pid or progress write for the next tick (a unit's end
        # clears both: its terminal write carries them).
        self._grouped: dict[str, Slot] = {}
        self._next_heartbeat = 0.0
        self._next_expire = 0.0

    # -- writes ---------------------------------------------------------------------

    def submit(  # noqa: PLR0917 - the register call's own arguments, passed on
        self,
        record: WorkRecord,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        key: str | None,
        max_attempts: int | None,
        *,
        starts_now: bool,
    ) -> UnitRow | None:
        """Insert the unit's row (fully synced); the existing row when ``key`` is taken.

        With ``starts_now`` the row is inserted ``running`` (this session's); the
        caller's start then writes nothing more (``running_in_ledger``).
        """
        durable = actor_class.to_durable(spec, timeout)
        stored = self.ledger.encode_spec(durable, record.id)
        # A unit with a retry policy keeps its spec and continues after a lost
        # supervisor too: one attempt counter serves both (supervisor.retries).
        resumable = actor_class.resumable(durable, stored.format) or record.retry is not None
        attempts = max_attempts if max_attempts is not None else (3 if resumable else 1)
        if record.restart is not None:
            # A restart policy keeps the spec too; its intensity, not a count, bounds it.
            resumable, attempts = True, UNBOUNDED_ATTEMPTS
        new = NewUnit.of(
            record,
            stored,
            key=key,
            max_attempts=attempts,
            resumable=resumable,
            session=self.session,
            started_at=self._clock.now() if starts_now else None,
        )
        row, created = self.ledger.submit(new)
        return None if created else row

    def on_change(self, old: WorkRecord | None, new: WorkRecord, slot: Slot | None) -> None:
        """Mirror a non-terminal change: status; group pid and progress.

        Terminal changes go through ``end``, in groups.
        """
        if old is None:
            return  # the submit wrote the row
        if is_terminal(new.status) and not is_terminal(old.status):
            self.end([(new, slot)])
            return
        try:
            if old.status != new.status:
                fields: dict[str, Any] = {}
                if new.status == Status.RUNNING:
                    fields["session"] = self.session
                self.ledger.write(new, attempt=new.attempt, **fields)
            elif slot is None:
                return
            elif old.pid != new.pid and new.pid is not None:
                # Shown by ls/show only (signals go through pidfds): grouped per tick.
                slot.pid = Write(new.id, new.attempt, {"pid": new.pid})
                self._grouped[new.id] = slot
            elif new.progress_at != old.progress_at:  # every report is stamped
                slot.progress = (
                    new.id,
                    new.attempt,
                    new.progress,
                    new.progress_message,
                    new.progress_at,
                    new.evidence,
                )
                self._grouped[new.id] = slot
        except WorkunitsError:
            log.exception("ledger: could not record %s (%s)", new.id, new.status.value)

    def end(self, ends: list[tuple[WorkRecord, Slot | None]]) -> None:
        """Write terminal records with their notices: one fully synced transaction.

        Each notice is built from the record in hand, not read back from the row
        inside the transaction (that was a third of the write's CPU, profiled).
        """
        writes: list[Write] = []
        for new, slot in ends:
            if slot is not None:
                slot.pid = None  # the terminal write carries the pid
                if slot.suspended:
                    continue  # a deploy stopped it: the next session resumes it
            writes.append(Write(new, new.attempt, notification=Notification.of(new)))
        if writes:
            self._write_ends(writes)
        for new, slot in ends:
            if slot is not None and slot.end_requests:
                self._answer_at_end(new, slot)

    def _write_ends(self, writes: list[Write]) -> None:
        outcomes: list[WriteOutcome | None]
        try:
            outcomes = list(self.ledger.write_many(writes))
        except WorkunitsError:
            if len(writes) == 1:
                log.exception("ledger: could not record the end of %s", _id_of(writes[0]))
                outcomes = [None]
            else:  # one bad row must not cost the others their end: one at a time
                outcomes = [self._write_one(w) for w in writes]
        for w, outcome in zip(writes, outcomes, strict=True):
            if outcome is WriteOutcome.STALE:
                log.error("ledger: the end of %s was refused: a later attempt owns it", _id_of(w))

    def _write_one(self, w: Write) -> WriteOutcome | None:
        try:
            (outcome,) = self.ledger.write_many([w])
        except WorkunitsError:
            log.exception("ledger: could not record the end of %s", _id_of(w))
            return None
        return outcome

    def _answer_at_end(self, record: WorkRecord, slot: Slot) -> None:
        """Finish the cancel and kill requests that waited for ``record``'s terminal write.

        Answered here, not when the Cancel or Kill was handed to the unit's actor:
        the unit may have exited on its own first (its end was already queued),
        and then the request changed nothing. ``changed`` says what happened.
        """
        seqs, slot.end_requests = slot.end_requests, []
        for seq in seqs:
            result = {"changed": record.status == Status.KILLED, "status": record.status.value}
            try:
                self.ledger.finish_request(seq, result)
            except WorkunitsError:
                log.exception("ledger: could not answer request %d", seq)

    def save_checkpoint(self, work_id: str, attempt: int, state: bytes) -> None:
        try:
            self.ledger.save_checkpoint_encoded(work_id, attempt, state)
        except WorkunitsError:
            log.exception("ledger: could not save the checkpoint of %s", work_id)

    def mark_delivered(self, notice: Notification) -> None:
        try:
            self.ledger.mark_delivered(notice.id, notice.status)
        except WorkunitsError:
            log.exception("ledger: could not mark the notice of %s delivered", notice.id)

    # -- reads that outlive memory ------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        row = self.ledger.get(work_id)
        if row is None:
            raise UnknownWork(f"no work unit {work_id!r} in this state dir")
        return row.to_record()

    def rows(
        self,
        status: Status | None,
        kind: str | None,
        parent: str | None,
        *,
        resident: Container[str],
    ) -> list[WorkRecord]:
        """Rows of units not in memory (``resident`` are)."""
        return [
            r.to_record()
            for r in self.ledger.list(status=status, kind=kind, parent=parent)
            if r.id not in resident
        ]

    def resumable(self, work_id: str) -> bool:
        row = self.ledger.get(work_id)
        return row is not None and row.resumable and row.attempt < row.max_attempts

    # -- every tick ---------------------------------------------------------------------

    def flush_grouped(self) -> None:
        """Write the pids and progress reported since the last tick."""
        if not self._grouped:
            return
        slots, self._grouped = list(self._grouped.values()), {}
        pids = [s.pid for s in slots if s.pid is not None]
        progress = [s.progress for s in slots if s.progress is not None]
        for s in slots:
            s.pid = s.progress = None
        try:
            if pids:
                self.ledger.write_many(pids)
        except WorkunitsError:
            log.exception("ledger: could not record pids")
        try:
            if progress:
                self.ledger.write_progress_batch(progress)
        except WorkunitsError:
            log.exception("ledger: could not record progress")

    def periodic(self, now: float) -> None:
        """The session's heartbeat and the retention sweep, each at its own pace."""
        try:
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + HEARTBEAT_EVERY
                self.ledger.heartbeat(self.session)
            if now >= self._next_expire:
                self._next_expire = now + EXPIRE_EVERY
                self.ledger.expire()
        except LedgerError:
            log.exception("ledger: a periodic duty failed")

    # -- shutdown -------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.ledger.close_session(self.session)
        except WorkunitsError:
            log.exception("ledger: could not close session %s", self.session)
        self.ledger.close()


def _id_of(w: Write) -> str:
    return w.target.id if isinstance(w.target, WorkRecord) else w.target
