"""The supervisor's side of the ledger: what it writes, recovers, adopts and applies.

A mixin of SupervisorActor; every method runs in the supervisor actor's thread,
which is the ledger's only writer of unit rows (DESIGN §6). Other processes
insert pending units (``wu.connect().shell(...)``) and append requests; the
supervisor adopts and applies them on its ticks.

- Submits and terminal writes are fully synced; the terminal write and its
  outbox notice commit together (invariant 11). Progress is grouped per tick.
- At start, running units of dead sessions are resumed (same ID, next
  attempt, last checkpoint) when their kind says they can be, else they fail
  with reason ``lost``.
- Writes carry the attempt; the ledger refuses a stale one (invariant 13).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from workunits._errors import (
    LedgerError,
    SpecError,
    UnknownKind,
    UnknownWork,
    WorkunitsError,
)
from workunits._ledger import Ledger, NewUnit, Request, UnitRow, Write, WriteOutcome
from workunits._record import Notification, WorkRecord, replace
from workunits._status import Reason, Status, is_terminal

if TYPE_CHECKING:
    from workunits.actors.base import WorkActor

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0
EXPIRE_EVERY = 60.0
ADOPT_BATCH = 256


class DurableSupervisor:
    """Ledger duties of the supervisor actor (see the module docstring)."""

    # Provided by SupervisorActor.
    _clock: Any
    kinds: Any
    registry: Any

    def _init_durable(self, ledger: Ledger, session: str) -> None:
        self._ledger = ledger
        self._session = session
        self._progress: dict[str, tuple[str, int, float, str | None]] = {}
        self._suspended: set[str] = set()  # stopped by a deploy: left running in the ledger
        self._pids: dict[str, Write] = {}  # pids to record at the next tick
        # Cancel and kill requests (by seq) that the unit's terminal write answers.
        self._end_requests: dict[str, list[int]] = {}
        self._next_heartbeat = 0.0
        self._next_expire = 0.0

    # -- hooks the actor calls ---------------------------------------------------

    def _admit(
        self,
        record: WorkRecord,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        checkpoint: bytes | None = None,
        *,
        running_in_ledger: bool = False,
    ) -> None:
        raise NotImplementedError  # SupervisorActor: insert into the registry and start

    def _submit_durably(  # noqa: PLR0917 - the register call's own arguments, passed on
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
        stored = self._ledger.encode_spec(durable, record.id)
        resumable = actor_class.resumable(durable, stored.format)
        attempts = max_attempts if max_attempts is not None else (3 if resumable else 1)
        new = NewUnit.of(
            record,
            stored,
            key=key,
            max_attempts=attempts,
            resumable=resumable,
            session=self._session,
            started_at=self._clock.now() if starts_now else None,
        )
        row, created = self._ledger.submit(new)
        return None if created else row

    def _ledger_on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        """Mirror a non-terminal change: status, pid and retain; queue progress.

        Terminal changes go through ``_ledger_end``, in groups.
        """
        if old is None:
            return  # the submit wrote the row
        if is_terminal(new.status) and not is_terminal(old.status):
            self._ledger_end([(old, new)])
            return
        try:
            if old.status != new.status:
                fields: dict[str, Any] = {}
                if new.status == Status.RUNNING:
                    fields["session"] = self._session
                self._ledger.write(new, attempt=new.attempt, **fields)
            elif old.retain != new.retain:
                self._ledger.write(new, attempt=new.attempt)
            elif old.pid != new.pid and new.pid is not None:
                # Shown by ls/show only (signals go through pidfds): grouped per tick.
                self._pids[new.id] = Write(new.id, new.attempt, {"pid": new.pid})
            elif new.progress is not None and (old.progress, old.progress_message) != (
                new.progress,
                new.progress_message,
            ):
                self._progress[new.id] = (
                    new.id,
                    new.attempt,
                    new.progress,
                    new.progress_message,
                )
        except WorkunitsError:
            log.exception("ledger: could not record %s (%s)", new.id, new.status.value)

    def _ledger_end(self, ends: list[tuple[WorkRecord, WorkRecord]]) -> None:
        """Write terminal records with their notices: one fully synced transaction.

        Each notice is built from the record in hand, not read back from the row
        inside the transaction (that was a third of the write's CPU, profiled).
        """
        writes: list[Write] = []
        for _old, new in ends:
            self._pids.pop(new.id, None)  # the terminal write carries the pid
            if new.id in self._suspended:
                continue  # a deploy stopped it: the next session resumes it
            writes.append(Write(new, new.attempt, notification=Notification.of(new)))
        if not writes:
            return
        outcomes: list[WriteOutcome | None]
        try:
            outcomes = list(self._ledger.write_many(writes))
        except WorkunitsError:
            if len(writes) == 1:
                log.exception("ledger: could not record the end of %s", _id_of(writes[0]))
                outcomes = [None]
            else:  # one bad row must not cost the others their end: one at a time
                outcomes = [self._ledger_write_one(w) for w in writes]
        for w, outcome in zip(writes, outcomes, strict=True):
            if outcome is WriteOutcome.STALE:
                log.error("ledger: the end of %s was refused: a later attempt owns it", _id_of(w))
        for _old, new in ends:
            if new.id in self._end_requests:
                self._answer_at_end(new)

    def _ledger_write_one(self, w: Write) -> WriteOutcome | None:
        try:
            (outcome,) = self._ledger.write_many([w])
        except WorkunitsError:
            log.exception("ledger: could not record the end of %s", _id_of(w))
            return None
        return outcome

    def _save_checkpoint(self, work_id: str, attempt: int, state: bytes) -> None:
        try:
            self._ledger.save_checkpoint_encoded(work_id, attempt, state)
        except WorkunitsError:
            log.exception("ledger: could not save the checkpoint of %s", work_id)

    def _mark_delivered(self, notice: Notification) -> None:
        try:
            self._ledger.mark_delivered(notice.id, notice.status)
        except WorkunitsError:
            log.exception("ledger: could not mark the notice of %s delivered", notice.id)

    # -- reads that outlive memory ------------------------------------------------

    def _from_ledger(self, work_id: str) -> WorkRecord:
        row = self._ledger.get(work_id)
        if row is None:
            raise UnknownWork(f"no work unit {work_id!r} in this state dir")
        return row.to_record()

    def _ledger_rows(
        self, status: Status | None, kind: str | None, parent: str | None
    ) -> list[WorkRecord]:
        return [
            r.to_record()
            for r in self._ledger.list(status=status, kind=kind, parent=parent)
            if r.id not in self.registry
        ]

    # -- start-up ---------------------------------------------------------------------

    def recover(self) -> dict[str, list[str]]:
        """Open the session; resume or fail what dead sessions left running; adopt pending."""
        self._ledger.open_session(self._session, os.getpid())
        self._ledger.reopen_requests(self._session)
        resumed: list[str] = []
        lost: list[str] = []
        for row in self._ledger.units_of_dead_sessions(self._session):
            (resumed if self._resume_or_lose(row) else lost).append(row.id)
        self._apply_requests()  # before adopting: a cancel sent while no supervisor ran wins
        adopted = self._adopt_pending()
        return {"resumed": resumed, "lost": lost, "adopted": adopted}

    def _resume_or_lose(self, row: UnitRow) -> bool:
        try:
            actor_class = self.kinds.actor_class(row.id[0])
            durable = self._ledger.load_spec(row.id)
            if row.resumable and row.attempt < row.max_attempts:
                spec, timeout = actor_class.from_durable(durable)
                attempt = self._ledger.begin_attempt(row.id, self._session, expected=row.attempt)
                record = replace(row.to_record(), status=Status.PENDING, attempt=attempt, pid=None)
                self._admit(record, actor_class, spec, timeout, row.checkpoint)
                return True
            error = f"lost: its supervisor (session {row.session}) ended while it ran"
            if row.resumable:
                error += f"; all {row.max_attempts} attempts are used"
        except (WorkunitsError, UnknownKind) as exc:
            error = f"lost: could not resume it: {type(exc).__name__}: {exc}"
        self._lose(row, error)
        return False

    def _lose(self, row: UnitRow, error: str) -> None:
        failed = Write(
            row.id,
            row.attempt,
            {
                "status": Status.FAILED.value,
                "reason": Reason.LOST.value,
                "error": error,
                "ended_at": self._clock.now(),
            },
        )
        # pending -> failed is no transition (only a cancel ends a pending unit): a
        # pending unit that cannot start passes through running, in one transaction,
        # as a unit whose launch fails does. Without it the write was refused, and
        # the unit stayed pending, retried and refused again at every tick.
        batch = [failed]
        if row.status == Status.PENDING:
            batch.insert(0, Write(row.id, row.attempt, {"status": Status.RUNNING.value}))
        try:
            self._ledger.write_many(batch)
        except WorkunitsError:
            log.exception("ledger: could not record %s as lost", row.id)

    def _adopt_pending(self) -> list[str]:
        """Start pending units other processes submitted (or a dead session left)."""
        adopted: list[str] = []
        for row in self._ledger.list(status=Status.PENDING, limit=ADOPT_BATCH):
            if row.id in self.registry:
                continue
            try:
                actor_class = self.kinds.actor_class(row.id[0])
                spec, timeout = actor_class.from_durable(self._ledger.load_spec(row.id))
                self._ledger.write(row.id, attempt=row.attempt, session=self._session)
            except (WorkunitsError, UnknownKind) as exc:
                self._lose(row, f"could not start: {type(exc).__name__}: {exc}")
                continue
            self._admit(row.to_record(), actor_class, spec, timeout, row.checkpoint)
            adopted.append(row.id)
        return adopted

    # -- every tick ---------------------------------------------------------------------

    def _durable_tick(self, now: float) -> None:
        if self._pids:
            pids, self._pids = list(self._pids.values()), {}
            try:
                self._ledger.write_many(pids)
            except WorkunitsError:
                log.exception("ledger: could not record pids")
        if self._progress:
            items, self._progress = list(self._progress.values()), {}
            try:
                self._ledger.write_progress_batch(items)
            except WorkunitsError:
                log.exception("ledger: could not record progress")
        try:
            self._apply_requests()
            self._adopt_pending()
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + HEARTBEAT_EVERY
                self._ledger.heartbeat(self._session)
            if now >= self._next_expire:
                self._next_expire = now + EXPIRE_EVERY
                self._ledger.expire()
        except LedgerError:
            log.exception("ledger: a periodic duty failed")

    def _apply_requests(self) -> None:
        for request in self._ledger.take_requests(64, session=self._session):
            try:
                result = self._apply(request)
            except WorkunitsError as exc:
                result = {"changed": False, "error": f"{type(exc).__name__}: {exc}"}
            if result is not None:
                self._ledger.finish_request(request.seq, result)

    def _answer_at_end(self, record: WorkRecord) -> None:
        """Finish the cancel and kill requests that waited for ``record``'s terminal write.

        Answered here, not when the Cancel or Kill was handed to the unit's actor:
        the unit may have exited on its own first (its end was already queued),
        and then the request changed nothing. ``changed`` says what happened.
        """
        for seq in self._end_requests.pop(record.id, ()):
            result = {"changed": record.status == Status.KILLED, "status": record.status.value}
            try:
                self._ledger.finish_request(seq, result)
            except WorkunitsError:
                log.exception("ledger: could not answer request %d", seq)

    def _apply(self, request: Request) -> dict[str, Any] | None:
        """Apply one request; its answer, or None when the unit's end will answer it."""
        target = request.target
        if target not in self.registry:
            row = self._ledger.require(target)
            if row.status == Status.PENDING and request.verb in ("cancel", "kill"):
                # Never started: it ends without running (pending -> killed).
                reason = Reason.CANCELLED if request.verb == "cancel" else Reason.KILLED
                self._ledger.write(
                    target,
                    attempt=row.attempt,
                    status=Status.KILLED.value,
                    reason=reason.value,
                    ended_at=self._clock.now(),
                )
                return {"changed": True, "status": Status.KILLED.value}
            if request.verb in ("retain", "release") and row.expired_at is None:
                # Not in memory (evicted, or never started here): the hold is on the
                # row, which expiry leaves alone while its count is above zero.
                count = row.retain + 1 if request.verb == "retain" else max(0, row.retain - 1)
                if count != row.retain:
                    self._ledger.write(target, attempt=row.attempt, retain=count)
                return {"changed": count != row.retain, "status": row.shown_status}
            return {"changed": False, "status": row.shown_status}
        if request.verb in ("cancel", "kill"):
            if request.verb == "cancel":
                grace = float(request.args.get("grace", 5.0))
                changed: object = self.cancel(target, grace)  # type: ignore[attr-defined]
            else:
                changed = self.kill(target)  # type: ignore[attr-defined]
            record = self.registry.get(target)
            if not is_terminal(record.status):  # ending, or its end is already queued
                self._end_requests.setdefault(target, []).append(request.seq)
                return None
            return {"changed": bool(changed), "status": record.status.value}
        if request.verb == "retain":
            changed = self.retain(target) is not None  # type: ignore[attr-defined]
        elif request.verb == "release":
            changed = self.release(target) is not None  # type: ignore[attr-defined]
        else:
            raise SpecError(f"request verb {request.verb!r} is not applied by a supervisor")
        status = self.registry.get(target).status.value
        return {"changed": bool(changed), "status": status}

    # -- shutdown -------------------------------------------------------------------------

    def _resumable(self, work_id: str) -> bool:
        row = self._ledger.get(work_id)
        return row is not None and row.resumable and row.attempt < row.max_attempts

    def _close_durable(self) -> None:
        try:
            self._ledger.close_session(self._session)
        except WorkunitsError:
            log.exception("ledger: could not close session %s", self._session)
        self._ledger.close()


def _id_of(w: Write) -> str:
    return w.target.id if isinstance(w.target, WorkRecord) else w.target
