"""``LedgerMirror``: what the supervisor writes to the ledger, and the reads that outlive memory.

Owned by the SupervisorActor; every method runs in its thread, which is the
ledger's only writer of unit rows (DESIGN §6). What the ledger brings in
(dead sessions' units, other processes' submits and requests) is
``supervisor.actor.recovery``'s.

- Submits and terminal writes are fully synced; the terminal write and its
  outbox notice commit together (invariant 11). Pids and progress are grouped
  per tick.
- Writes carry the attempt; the ledger refuses a stale one (invariant 13).
- No write is dropped (invariant 14): one that fails waits in the ``FailedWrites``
  and is retried every tick, in order per unit; until a unit's status lands,
  ``marked`` shows its record as not durable, and whoever waits for its end
  hears of it only once it has landed (the ``done`` of ``end``). Submits are
  not kept: the caller gets the error (a unit starts only once its row is
  durable). Pids and progress are dropped on a failure: the next report
  carries them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Container, Iterator
from typing import Any

from workunits._core.clock import Clock
from workunits._core.errors import LedgerError, LedgerGone, SessionLost, UnknownWork, WorkunitsError
from workunits._core.record import Notification, WorkRecord, replace
from workunits._core.restart import UNBOUNDED_ATTEMPTS
from workunits._core.retry import counted
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import Ledger, NewUnit, UnitRow, Write
from workunits.actors.base import WorkActor
from workunits.actors.kind_code import call_kind
from workunits.supervisor.actor.failed_writes import FailedWrites, Pending
from workunits.supervisor.actor.slots import UnitSlot

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0
EXPIRE_EVERY = 60.0
CLOSE_RETRY_FOR = 10.0  # seconds close() keeps retrying writes that have not landed


class LedgerMirror:
    def __init__(
        self, ledger: Ledger, session: str, clock: Clock, *, lease: float | None = None
    ) -> None:
        self.ledger = ledger
        # The heartbeat renews the session's lease: several times per lease, so
        # one slow tick or a busy ledger does not let it lapse.
        self._heartbeat_every = (
            HEARTBEAT_EVERY if lease is None else min(HEARTBEAT_EVERY, lease / 4)
        )
        self.session = session
        self._clock = clock
        self.backlog = FailedWrites(ledger)
        # Units whose status writes wait for the end of ``grouping_status``; None outside.
        self._held: list[str] | None = None
        # Slots holding a pid or progress write for the next tick (a unit's end
        # clears both: its terminal write carries them).
        self._grouped: dict[str, UnitSlot] = {}
        self._next_heartbeat = 0.0
        self._next_expire = 0.0

    # -- writes ---------------------------------------------------------------------

    def new_unit(  # noqa: PLR0917 - the register call's own arguments, passed on
        self,
        record: WorkRecord,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        key: str | None,
        max_attempts: int | None,
        *,
        starts_now: bool,
    ) -> NewUnit:
        """The unit's row, its spec encoded (and sealed): what ``submit_many`` inserts.

        With ``starts_now`` the row is inserted ``running`` (this session's); the
        caller's start then writes nothing more (``running_in_ledger``).
        """
        durable = call_kind(actor_class, actor_class.to_durable, spec, timeout)
        stored = self.ledger.units.encode_spec(durable, record.id)
        # A unit with a retry policy keeps its spec and continues after a lost
        # supervisor too: one attempt counter serves both (supervisor.actor.retries).
        resumable = (
            call_kind(actor_class, actor_class.resumable, durable, stored.format)
            or record.retry is not None
        )
        attempts = max_attempts if max_attempts is not None else (3 if resumable else 1)
        if record.restart is not None:
            # A restart policy keeps the spec too; its intensity, not a count, bounds it.
            resumable, attempts = True, UNBOUNDED_ATTEMPTS
        return NewUnit.of(
            record,
            stored,
            key=key,
            max_attempts=attempts,
            resumable=resumable,
            session=self.session,
            started_at=self._clock.now() if starts_now else None,
        )

    def submit_many(self, news: list[NewUnit]) -> list[UnitRow | WorkunitsError | None]:
        """Insert the rows in one fully synced transaction (a group commit of submits).

        Per row: None when inserted, the existing row when its key is taken, or
        the error for that submit alone (an idempotency conflict...). A failed
        transaction raises (LedgerError): then none is written. Submits are not
        kept for a retry, unlike ends: their callers get the error.
        """
        return [
            a if isinstance(a, WorkunitsError) else (None if a[1] else a[0])
            for a in self.ledger.units.submit_many(news, wake=False)  # in memory here already
        ]

    @contextlib.contextmanager
    def grouping_status(self) -> Iterator[None]:
        """Within the block, status writes (a start's ``running``) are held, and land
        together at its end in one transaction -- the units a group of ends lets start
        pay one commit, not one each. A start still launches only once its write has
        landed (``when_status_lands``), so nothing runs before the ledger says so."""
        if self._held is not None:  # nested: the outer block lands them
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held:
                self.backlog.land_held(held)

    def on_change(self, old: WorkRecord | None, new: WorkRecord, slot: UnitSlot | None) -> None:
        """Mirror a non-terminal change: status; group pid and progress.

        Terminal changes go through ``end``, in groups.
        """
        if old is None:
            return  # the submit wrote the row
        if is_terminal(new.status) and not is_terminal(old.status):
            self.end([(new, slot, _nothing)])
            return
        if old.status != new.status:
            fields: dict[str, Any] = {}
            if new.status == Status.RUNNING:
                fields["session"] = self.session
            write = Write(new, new.attempt, fields)
            what = f"{new.id} as {new.status.value}"
            item = Pending(new.id, what, [write], status=True)
            if self._held is None:
                self.backlog.submit([item])
            else:  # landed with the others of this message, in one transaction
                self.backlog.hold(item)
                self._held.append(new.id)
            return
        try:
            if slot is None:
                return
            if old.pid != new.pid and new.pid is not None:
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

    def end(self, ends: list[tuple[WorkRecord, UnitSlot | None, Callable[[], None]]]) -> None:
        """Write terminal records with their notices: one fully synced transaction.

        Each end's ``done`` runs once its write has landed -- now, or on the
        retry that lands it (the ``FailedWrites``), after the unit's earlier writes.
        Each notice is built from the record in hand, not read back from the row
        inside the transaction (that was a third of the write's CPU, profiled).
        """
        items: list[Pending] = []
        suspended: list[Callable[[], None]] = []
        for new, slot, done in ends:
            finish = self._finisher(new, slot, done)
            if slot is not None:
                slot.pid = None  # the terminal write carries the pid
                if slot.suspended:  # a deploy stopped it: the next session resumes it
                    if new.reason is Reason.HANDED_OVER and new.started_at is not None:
                        # Its attempt is logged handed-over, not lost: it counts as
                        # no failure, and its next attempt says so (attempts).
                        items.append(self._handed_over(new))
                    suspended.append(finish)
                    continue
            write = Write(new, new.attempt, notification=Notification.of(new))
            items.append(Pending(new.id, f"the end of {new.id}", [write], done=finish, status=True))
        if items:
            self.backlog.submit(items)
        for finish in suspended:
            finish()

    def _handed_over(self, record: WorkRecord) -> Pending:
        def hand_over() -> None:
            self.ledger.attempts.hand_over(record.id, record.attempt)

        return Pending(record.id, f"the hand-over of {record.id}", call=hand_over)

    def _finisher(
        self, record: WorkRecord, slot: UnitSlot | None, done: Callable[[], None]
    ) -> Callable[[], None]:
        def finish() -> None:
            if slot is not None and slot.end_requests:
                self._answer_at_end(record, slot)
            done()

        return finish

    def _answer_at_end(self, record: WorkRecord, slot: UnitSlot) -> None:
        """Finish the cancel and kill requests that waited for ``record``'s terminal write.

        Answered here, not when the Cancel or Kill was handed to the unit's actor:
        the unit may have exited on its own first (its end was already queued),
        and then the request changed nothing. ``changed`` says what happened.
        """
        seqs, slot.end_requests = slot.end_requests, []
        result = {"changed": record.status == Status.KILLED, "status": record.status.value}
        for seq in seqs:
            self.finish_request(record.id, seq, result)

    def finish_request(self, work_id: str, seq: int, result: dict[str, Any]) -> None:
        """Answer request ``seq`` (about ``work_id``) for the process that made it."""

        def finish() -> None:
            self.ledger.requests.finish(seq, result)

        self.backlog.submit([Pending(work_id, f"the answer to request {seq}", call=finish)])

    def save_checkpoint(
        self, work_id: str, attempt: int, state: bytes, consumed: tuple[int, ...] = ()
    ) -> None:
        def save() -> None:
            self.ledger.attempts.save_checkpoint_encoded(work_id, attempt, state, consumed=consumed)

        what = f"a checkpoint of {work_id}"
        # A newer one replaces it while both wait, unless it consumes signals: those
        # must be marked with the state that took them in, so it is kept.
        key = f"checkpoint {attempt}" if not consumed else f"checkpoint {attempt} {consumed}"
        self.backlog.submit([Pending(work_id, what, call=save, key=key)])

    def mark_delivered(self, work_id: str, status: Status) -> None:
        """The notice of ``work_id`` was acknowledged (kept and retried, like any write)."""

        def mark() -> None:
            self.ledger.outbox.mark_delivered(work_id, status)

        what = f"the acknowledgement of the notice of {work_id}"
        self.backlog.submit([Pending(work_id, what, call=mark)])

    def write_lost(self, work_id: str, writes: list[Write]) -> None:
        """Recovery's end of a unit not in memory (failed ``lost``), kept until it lands."""
        self.backlog.submit([Pending(work_id, f"the end of {work_id}", writes, status=True)])

    def when_status_lands(self, work_id: str, then: Callable[[], None]) -> bool:
        """``then`` once the unit's status write waiting in the backlog lands; False when
        none waits (its status is durable already)."""
        return self.backlog.when_status_lands(work_id, then)

    def marked(self, record: WorkRecord) -> WorkRecord:
        """``record`` as get/list show it: not durable while its status waits to be written."""
        if self.backlog.status_waiting(record.id):
            return replace(record, durable=False)
        return record

    # -- reads that outlive memory ------------------------------------------------

    def get(self, work_id: str) -> WorkRecord:
        row = self.ledger.units.get(work_id)
        if row is None:
            raise UnknownWork(f"no work unit {work_id!r} in this state dir")
        return self.ledger.units.record(row)

    def rows(
        self,
        status: Status | None,
        kind: str | None,
        parent: str | None,
        *,
        resident: Container[str],
    ) -> list[WorkRecord]:
        """Rows of units not in memory (``resident`` are)."""
        return self.ledger.units.records(
            r
            for r in self.ledger.units.list(status=status, kind=kind, parent=parent)
            if r.id not in resident
        )

    def resumable(self, work_id: str) -> bool:
        row = self.ledger.units.get(work_id)
        # Handed over, its attempt counts as no failure: a deploy keeps it resumable.
        return (
            row is not None
            and row.resumable
            and counted(row.attempt, row.attempts) < row.max_attempts
        )

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
        # Dropped when they fail: the next report carries the newer value.
        try:
            if pids:
                self.ledger.attempts.write_many(pids)
        except WorkunitsError as exc:
            self.backlog.report(exc, "pids (dropped: shown by ls/show only)", kept=False)
        try:
            if progress:
                self.ledger.attempts.write_progress_batch(progress)
        except WorkunitsError as exc:
            self.backlog.report(exc, "progress (dropped: the next report carries it)", kept=False)

    def retry(self) -> None:
        """Every tick: retry the writes that failed (see ``FailedWrites``)."""
        self.backlog.retry()

    def periodic(self, now: float) -> list[str]:
        """The session's heartbeat and the retention sweep (with the claims of dead
        consumers handed back), each at its own pace; the IDs of the units it expired.

        Raises SessionLost when the heartbeat finds the session taken over.
        """
        expired: list[str] = []
        try:
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + self._heartbeat_every
                self.ledger.sessions.heartbeat(self.session)
            if now >= self._next_expire:
                self._next_expire = now + EXPIRE_EVERY
                expired = self.ledger.retention.expire_due()
                self.ledger.outbox.release_dead()
        except SessionLost:
            raise
        except LedgerError as exc:
            self.backlog.report(exc, "the session's heartbeat or the retention sweep", kept=False)
        return expired

    # -- shutdown -------------------------------------------------------------------------

    def close(self) -> None:
        """At stop: land what waits (for up to CLOSE_RETRY_FOR s), end the session, close.

        A ledger that is gone (invariant 16) takes nothing more: what waits is
        said and dropped at once, and no session end is written.
        """
        try:
            self.ledger.check_in_place()
        except LedgerGone as exc:
            left = self.backlog.waiting()
            log.error(  # noqa: TRY400 - the message is the cause
                "ledger: closing with %d writes held in memory only, since the ledger is "
                "gone (%s): %s",
                len(left),
                exc,
                "; ".join(left[:20]) or "none",
            )
            self.ledger.close()
            return
        left = self.backlog.drain(CLOSE_RETRY_FOR)
        if left:
            more = f"; and {len(left) - 20} more" if len(left) > 20 else ""
            shown = "; ".join(left[:20]) + more
            log.error(
                "ledger: closing with %d writes that did not land within %.0f s, so the "
                "ledger does not hold them: %s. A unit whose end is missing runs again, or "
                "fails lost, under the next supervisor",
                len(left),
                CLOSE_RETRY_FOR,
                shown,
            )
        try:
            self.ledger.sessions.close(self.session)
        except WorkunitsError:
            log.exception("ledger: could not close session %s", self.session)
        self.ledger.close()


def _nothing() -> None:
    """The ``done`` of an end whose effects the caller has already seen to."""
