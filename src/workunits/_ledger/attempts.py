"""Attempts: what a unit's current attempt writes, fenced by its number, and the next one's start.

Every write here carries the attempt it comes from (invariant 13): a write of
an attempt that is no longer the unit's current one raises StaleAttempt and
changes nothing. A supervisor's ledger also carries its session (``fence``):
once another supervisor took the session over, nothing it writes is kept.

- ``write`` / ``write_many``: a record's columns through the one function that
  changes a unit's status (``writes.apply``); a terminal write commits its
  outbox notice in the same, fully synced transaction (invariant 11).
- ``write_progress_batch``: progress, grouped per tick, NORMAL sync.
- ``save_checkpoint``: what a later attempt resumes from, fully synced, with
  the signals it covers marked consumed in the same transaction.
- ``resume``: a running unit of a dead session goes on as its next attempt;
  the attempt it had is logged ``lost``, or ``handed-over`` when a deploy
  handed it over (``hand_over``). A hand-over raises the attempt (fencing needs
  it) but counts as no failure against ``max_attempts`` (``_core.retry.counted``).
- ``schedule_retry`` / ``begin_retry``: between attempts a unit stays
  ``running`` (no status change, no notice): its row says when the next
  attempt is due (``retry_at``) and lists the attempts that failed
  (``attempts_log``). Both writes are fenced and fully synced, so a
  supervisor SIGKILLed while a unit waits finds the schedule and continues it
  (``Sessions.units_of_dead_sessions``).

Every attempt that is not the unit's last leaves an entry in ``attempts_log``
(invariant 13). A COMMIT whose answer was lost is settled by reading back
(``settle``) before the caller is told.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from workunits._core import ids
from workunits._core.errors import (
    InvalidTransition,
    SpecError,
    StaleAttempt,
    UnknownWork,
    UnstorableValue,
)
from workunits._core.record import Notification, WorkRecord
from workunits._core.retry import Attempt, attempts_from_json, attempts_to_json, counted
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import settle, signals, values, writes
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import IN_TERMINAL, TERMINAL, UnitRow
from workunits._ledger.sessions import validate as validate_session
from workunits._ledger.units import Units
from workunits._ledger.writes import NO_RESULT, Write, WriteOutcome, status_of
from workunits._util import strictjson

ProgressItem = (
    tuple[str, int, float | None, str | None]
    | tuple[str, int, float | None, str | None, float | None, Mapping[str, Any] | None]
)
"""``(id, attempt, fraction, message)``, optionally with ``(at, evidence)``."""


class Attempts:
    """The fenced writes of one Ledger's units. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext, units: Units) -> None:
        self._ctx = ctx
        self._units = units

    # -- records ---------------------------------------------------------------------

    def write(
        self,
        target: WorkRecord | str,
        *,
        attempt: int,
        result: object = NO_RESULT,
        json_result: bool = False,
        notification: Notification | None = None,
        **fields: object,
    ) -> bool:
        """Write a record's columns (or ``fields`` of the unit ``target``), fenced by attempt.

        Returns False when the write was ignored because it would leave a
        terminal status (a normal race). Raises StaleAttempt when ``attempt``
        is not the unit's current one. A write that makes the unit terminal
        commits its outbox notice in the same, fully synced transaction.
        """
        w = Write(target, attempt, fields, result, json_result, notification)
        ((outcome, current),) = self._apply([w])
        if outcome is WriteOutcome.STALE:
            raise StaleAttempt(_id_of(target), attempt, current)
        return outcome is WriteOutcome.WRITTEN

    def write_many(self, batch: Iterable[Write]) -> list[WriteOutcome]:
        """Apply several writes in one transaction (one commit, one sync for the group).

        Each write's outcome is in the list; a stale or ignored one does not
        stop the others. The group is fully synced when any write in it makes
        a unit terminal or stores a result, else NORMAL.
        """
        return [outcome for outcome, _ in self._apply(list(batch))]

    def _apply(self, batch: list[Write]) -> list[tuple[WriteOutcome, int]]:
        prepared = [writes.prepare(w, self._offload_result(w), self._seal_cause(w)) for w in batch]
        durable = any(
            "result" in p.columns or (p.status is not None and is_terminal(p.status))
            for p in prepared
        )
        now = self._ctx.now()
        expire_after = self._ctx.expire_after

        def write() -> list[tuple[WriteOutcome, int]]:
            with self._ctx.db.write(durable=durable) as conn:
                return [writes.apply(conn, p, now=now, expire_after=expire_after) for p in prepared]

        def landed(conn: Connection) -> list[tuple[WriteOutcome, int]] | None:
            if not writes.landed(conn, prepared):
                return None  # written again: a replayed end is recognised (``writes``)
            return [(WriteOutcome.WRITTEN, p.attempt) for p in prepared]

        ids_ = {p.work_id for p in prepared}
        return settle.settled_write(
            self._ctx.db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"a write of {', '.join(sorted(ids_)[:3])}"
            + (" and more" if len(ids_) > 3 else ""),
            work_id=next(iter(ids_)) if len(ids_) == 1 else None,
        )

    def _offload_result(self, w: Write) -> values.Stored | None:
        stored = self._encode_result(w)
        if stored is None:
            return None
        return self._ctx.large.offload(
            stored, purpose="result", work_id=_id_of(w.target), durable=True
        )

    def _encode_result(self, w: Write) -> values.Stored | None:
        """The result to store: a value given to write(), or the bytes a record carries."""
        work_id = _id_of(w.target)
        if w.result is not NO_RESULT:
            return values.encode_result(
                w.result, work_id=work_id, key=self._ctx.signing_key, json_only=w.json_result
            )
        if isinstance(w.target, WorkRecord) and w.target.result is not None:
            fmt = w.target.result_format
            if fmt is None:
                raise SpecError(f"{work_id}: the record has a result but no result_format")
            return values.seal(
                w.target.result, fmt, purpose="result", work_id=work_id, key=self._ctx.signing_key
            )
        return None

    def _seal_cause(self, w: Write) -> values.Stored | None:
        if isinstance(w.target, WorkRecord) and w.target.cause is not None:
            return values.seal(
                w.target.cause,
                "pickle",
                purpose="cause",
                work_id=w.target.id,
                key=self._ctx.signing_key,
            )
        return None

    def write_progress_batch(self, items: Iterable[ProgressItem]) -> int:
        """Store ``(id, attempt, fraction, message[, at, evidence])`` items in one NORMAL
        transaction (``at``: when it was reported; ``evidence``: a JSON object).

        Items from a stale attempt, or for a unit that has ended, are dropped.
        Returns how many were written.
        """
        params = [_progress_params(*item) for item in items]
        if not params:
            return 0
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.executemany(
                "UPDATE units SET progress = ?, progress_message = ?, "  # noqa: S608
                "progress_at = coalesce(?, progress_at), progress_evidence = ? WHERE id = ? "
                f"AND attempt = ? AND status NOT IN {IN_TERMINAL}",
                [(*p, *TERMINAL) for p in params],
            )
            return cursor.rowcount

    # -- checkpoints -----------------------------------------------------------------

    def save_checkpoint(self, work_id: str, attempt: int, state: object) -> bool:
        """Store ``state`` (exact JSON, else UnstorableValue naming the path), fenced.

        Fully synced: a checkpoint is what a later attempt resumes from.
        Returns False when the unit has already ended (the checkpoint is moot).
        """
        ids.validate(work_id)
        return self._store_checkpoint(
            work_id, attempt, strictjson.dumps(state, f"checkpoint of {work_id}")
        )

    def save_checkpoint_encoded(
        self, work_id: str, attempt: int, data: bytes, *, consumed: Sequence[int] = ()
    ) -> bool:
        """Like ``save_checkpoint`` for JSON a unit process already encoded strictly.

        The supervisor receives checkpoints as bytes; decoding them only to
        encode them again would cost a round trip per checkpoint. The bytes
        must parse as JSON (UnstorableValue otherwise). ``consumed``: the
        signals the unit received since its last checkpoint, marked consumed in
        the same transaction (a resumed attempt will not receive them again).
        """
        ids.validate(work_id)
        if not isinstance(data, bytes):
            raise UnstorableValue(
                f"checkpoint of {work_id}: expected JSON bytes, got {type(data).__name__}"
            )
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UnstorableValue(
                f"checkpoint of {work_id} is not valid JSON ({exc}); nothing was stored"
            ) from None
        return self._store_checkpoint(work_id, attempt, data, consumed)

    def _store_checkpoint(
        self, work_id: str, attempt: int, data: bytes, consumed: Sequence[int] = ()
    ) -> bool:
        large = self._ctx.large
        signed = values.signed_json(data, "checkpoint", work_id, self._ctx.signing_key)
        stored = large.offload(signed, purpose="checkpoint", work_id=work_id, durable=True)
        with self._ctx.db.write(durable=True) as conn:
            row = conn.execute(
                "SELECT status, attempt, checkpoint_file FROM units WHERE id = ?", (work_id,)
            ).fetchone()
            if row is None:
                raise UnknownWork(f"the ledger has no unit {work_id}")
            if int(row["attempt"]) != attempt:
                raise StaleAttempt(work_id, attempt, int(row["attempt"]))
            if is_terminal(writes.status_of(row["status"], work_id)):
                ended = True
            else:
                ended = False
                conn.execute(
                    "UPDATE units SET checkpoint = ?, checkpoint_file = ?, checkpoint_mac = ? "
                    "WHERE id = ?",
                    (stored.data, stored.file, stored.mac, work_id),
                )
                if consumed:
                    signals.consume(conn, work_id, consumed, self._ctx.now())
        if ended:
            if stored.file not in (None, row["checkpoint_file"]):
                large.delete([stored.file])  # the checkpoint is moot
            return False
        if row["checkpoint_file"] not in (None, stored.file):
            # After the commit: until then the row pointed at the old file.
            large.delete([row["checkpoint_file"]])
        return True

    # -- the next attempt --------------------------------------------------------------

    def resume(
        self,
        work_id: str,
        session: str,
        *,
        expected: int | None = None,
        why: str | None = None,
    ) -> int:
        """Resume a ``running`` unit whose supervisor is gone as its next attempt (same ID)
        under ``session``; the new attempt number (``resumed`` says more)."""
        return self.resumed(work_id, session, expected=expected, why=why)[0]

    def resumed(
        self,
        work_id: str,
        session: str,
        *,
        expected: int | None = None,
        why: str | None = None,
    ) -> tuple[int, tuple[Attempt, ...]]:
        """``resume``: the new attempt number, and the attempts before it as now logged
        (what a supervisor's record of the unit shows, without reading it again).

        The attempt it had is logged, unless logged already: ``lost`` (its
        supervisor ended under it; ``why``, its error, says how), or
        ``handed-over`` by a deploy (``hand_over``), which counts as no failure.
        ``expected`` is the attempt the caller saw; if another attempt began
        since, StaleAttempt. InvalidTransition for a unit that is not running,
        or whose failures used its ``max_attempts`` (it fails ``lost`` instead).
        A COMMIT whose answer was lost is read back: the row at the next
        attempt, under ``session``, is this resume's.
        """
        ids.validate(work_id)
        validate_session(session)
        now = self._ctx.now()
        found: list[int] = []

        def write() -> tuple[int, tuple[Attempt, ...]]:
            with self._ctx.db.write(durable=True) as conn:
                row = _running(conn, work_id, expected, "resumed")
                attempt = int(row["attempt"])
                found[:] = [attempt]
                log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
                if not (log and log[-1].attempt == attempt):
                    lost = Attempt(
                        attempt,
                        now,
                        why
                        or f"lost: its supervisor (session {row['session']}) ended while it ran",
                        reason=Reason.LOST,
                    )
                    log = (*log, lost)
                used = counted(attempt, log)
                if used >= int(row["max_attempts"]):
                    raise InvalidTransition(
                        f"{work_id} has used {used} of {row['max_attempts']} attempts; "
                        f"end it failed with reason 'lost' instead"
                    )
                conn.execute(
                    "UPDATE units SET attempt = ?, session = ?, pid = NULL, attempts_log = ? "
                    "WHERE id = ?",
                    (attempt + 1, session, attempts_to_json(log).decode(), work_id),
                )
            return attempt + 1, log

        def landed(conn: Connection) -> tuple[int, tuple[Attempt, ...]] | None:
            if not found:
                return None
            row = conn.execute(
                "SELECT attempts_log FROM units WHERE id = ? AND attempt = ? AND session = ?",
                (work_id, found[0] + 1, session),
            ).fetchone()
            if row is None:
                return None
            log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
            return found[0] + 1, log

        return settle.settled_write(
            self._ctx.db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"the resume of {work_id}",
            work_id=work_id,
        )

    def hand_over(self, work_id: str, attempt: int) -> bool:
        """A deploy stopped ``attempt`` of a running unit for the next supervisor: log it
        ``handed-over`` (not a failure). False when the unit no longer runs at that
        attempt (it ended, or another attempt owns it)."""
        ids.validate(work_id)
        at = self._ctx.now()
        with self._ctx.db.write(durable=True) as conn:
            row = conn.execute(
                "SELECT status, attempt, attempts_log FROM units WHERE id = ?", (work_id,)
            ).fetchone()
            if row is None or int(row["attempt"]) != attempt:
                return False
            if status_of(row["status"], work_id) != Status.RUNNING:
                return False
            log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
            if log and log[-1].attempt == attempt:
                return True  # logged already (a replay)
            entry = Attempt(
                attempt,
                at,
                "handed over at a deploy: the next supervisor resumes it",
                reason=Reason.HANDED_OVER,
            )
            conn.execute(
                "UPDATE units SET attempts_log = ?, pid = NULL WHERE id = ?",
                (attempts_to_json((*log, entry)).decode(), work_id),
            )
        return True

    def schedule_retry(
        self, work_id: str, attempt: int, failed: Attempt, message: str
    ) -> tuple[Attempt, ...]:
        """``attempt`` failed; the next is due at ``failed.retry_at``. The attempts so far.

        StaleAttempt when another attempt owns the row; InvalidTransition when the
        unit is not running (it ended: nothing is retried after the end).
        """
        ids.validate(work_id)
        with self._ctx.db.write(durable=True) as conn:
            row = _running(conn, work_id, attempt, "retried")
            log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
            log = (*log, failed)
            conn.execute(
                "UPDATE units SET retry_at = ?, attempts_log = ?, pid = NULL, "
                "progress_message = ?, progress_at = ? WHERE id = ?",
                (
                    failed.retry_at,
                    attempts_to_json(log).decode(),
                    message,
                    failed.ended_at,
                    work_id,
                ),
            )
        return log

    def begin_retry(self, work_id: str, session: str, *, expected: int) -> tuple[int, UnitRow]:
        """Start the attempt after ``expected`` of a unit waiting between attempts, under
        ``session``; its number and its row. From here on a write of the failed
        attempt is stale."""
        ids.validate(work_id)
        validate_session(session)
        with self._ctx.db.write(durable=True) as conn:
            row = _running(conn, work_id, expected, "retried")
            if row["retry_at"] is None:
                raise InvalidTransition(f"{work_id} is not waiting for its next attempt")
            log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
            used = counted(expected, log)  # a hand-over at a deploy is no failure
            if used >= int(row["max_attempts"]):
                raise InvalidTransition(
                    f"{work_id} has used {used} of {row['max_attempts']} attempts"
                )
            conn.execute(
                "UPDATE units SET attempt = ?, retry_at = NULL, session = ?, pid = NULL "
                "WHERE id = ?",
                (expected + 1, session, work_id),
            )
        return expected + 1, self._units.require(work_id)


def _running(conn: Connection, work_id: str, attempt: int | None, done: str) -> sqlite3.Row:
    """The unit's row, inside the caller's write transaction, once it is ``running`` at
    ``attempt`` (None: at any): UnknownWork, StaleAttempt or InvalidTransition (saying
    only a running unit is ``done``) otherwise."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT status, attempt, max_attempts, retry_at, attempts_log, session FROM units "
        "WHERE id = ?",
        (work_id,),
    ).fetchone()
    if row is None:
        raise UnknownWork(f"the ledger has no unit {work_id}")
    if attempt is not None and int(row["attempt"]) != attempt:
        raise StaleAttempt(work_id, attempt, int(row["attempt"]))
    status = status_of(row["status"], work_id)
    if status != Status.RUNNING:
        raise InvalidTransition(f"{work_id} is {status.value}; only a running unit is {done}")
    return row


def _id_of(target: WorkRecord | str) -> str:
    return target.id if isinstance(target, WorkRecord) else target


def _progress_params(  # noqa: PLR0917 - the item's own fields
    work_id: str,
    attempt: int,
    fraction: float | None,
    message: str | None,
    at: float | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> tuple[float | None, str | None, float | None, str | None, str, int]:
    ids.validate(work_id)
    if fraction is not None and (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0.0 <= fraction <= 1.0
    ):
        raise UnstorableValue(f"progress of {work_id} must be a number in [0, 1], got {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise SpecError(f"progress message of {work_id} must be a str, got {message!r}")
    shown = None
    if evidence is not None:
        shown = strictjson.dumps(dict(evidence), f"progress evidence of {work_id}").decode()
    return (
        None if fraction is None else float(fraction),
        message,
        at,
        shown,
        work_id,
        attempt,
    )
