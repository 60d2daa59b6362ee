"""Fenced writes to one unit's row: the lifecycle, the attempt fence and the outbox.

One function, :func:`apply`, is the only code that changes a unit's status in
the ledger. Inside the caller's write transaction it:

1. refuses a write whose attempt is not the row's current one (invariant 13);
2. ignores a status change away from a terminal status -- "exited after
   kill" and friends are normal races (invariant 2) -- and raises for a change
   the lifecycle table forbids otherwise (a bug);
3. inserts the outbox row of a terminal transition in the same transaction
   as the transition (invariant 11): given by the caller, or built from the
   row just written, so a terminal row without its notice cannot exist.

A write of the terminal status a row already has, with its notice, at its
attempt, is the replay of an end whose COMMIT answer was lost: it counts as
written, and changes nothing. ``landed`` reads back whether a group of writes committed.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from workunits._core import ids
from workunits._core.errors import REPAIR, InvalidTransition, LedgerCorrupt, SpecError, UnknownWork
from workunits._core.record import Notification, WorkRecord
from workunits._core.status import Reason, Status, allowed, is_terminal
from workunits._ledger.backend import Connection
from workunits._ledger.rows import EXTRA_COLUMNS, RECORD_COLUMNS, UnitRow, encode_notification
from workunits._ledger.values import Stored

_WRITABLE = frozenset(RECORD_COLUMNS) | frozenset(EXTRA_COLUMNS)
_STATUSES = frozenset(s.value for s in Status)


class NoResult(enum.Enum):
    """The type of :data:`NO_RESULT`: "this write carries no result" (None is a result)."""

    NO_RESULT = enum.auto()


NO_RESULT = NoResult.NO_RESULT


class WriteOutcome(enum.Enum):
    """What became of one write."""

    WRITTEN = "written"
    IGNORED = "ignored"  # it would have left a terminal status: a normal race
    STALE = "stale"  # its attempt is not the unit's current one (invariant 13)


@dataclass(frozen=True, slots=True)
class Write:
    """One write for :meth:`Attempts.write_many`: a record (its mirrored columns) or an ID.

    ``fields`` sets further columns by name (``cancel_requested``,
    ``progress``, ...); ``result`` is a value to store as the unit's result.
    """

    target: WorkRecord | str
    attempt: int
    fields: Mapping[str, object] = field(default_factory=dict)
    result: object = NO_RESULT
    json_result: bool = False
    notification: Notification | None = None


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """A write with its columns encoded, ready to apply inside a transaction."""

    work_id: str
    attempt: int
    columns: dict[str, object]
    status: Status | None
    notification: Notification | None


def prepare(write: Write, result: Stored | None, cause: Stored | None = None) -> PreparedWrite:
    """Encode a write's columns; runs outside the transaction (it may pickle).

    ``result`` and ``cause`` come signed from the Ledger; None leaves the
    stored ones alone (a result, once written, is never cleared by a later
    write of a record that does not carry it).
    """
    if isinstance(write.target, WorkRecord):
        work_id = write.target.id
        columns = record_columns(write.target)
    else:
        work_id = ids.validate(write.target)
        columns = {}
    unknown = set(write.fields) - _WRITABLE
    if unknown:
        raise SpecError(
            f"{work_id}: the ledger has no writable column {sorted(unknown)}; "
            f"writable: {sorted(_WRITABLE)}"
        )
    columns.update((name, _sql(value)) for name, value in write.fields.items())
    for name, stored in (("result", result), ("cause", cause)):
        if stored is not None:
            columns.update(
                {
                    name: stored.data,
                    f"{name}_format": stored.format,
                    f"{name}_mac": stored.mac,
                    f"{name}_versions": stored.versions,
                }
            )
            if name == "result":  # only results may live in the value store
                columns["result_file"] = stored.file
    if isinstance(write.attempt, bool) or not isinstance(write.attempt, int):
        raise SpecError(f"{work_id}: attempt must be an int, got {write.attempt!r}")
    status = columns.get("status")
    if status is not None and status not in _STATUSES:
        raise SpecError(f"{work_id}: {status!r} is not a status")
    return PreparedWrite(
        work_id=work_id,
        attempt=write.attempt,
        columns=columns,
        status=None if status is None else Status(status),
        notification=write.notification,
    )


def apply(
    conn: Connection, p: PreparedWrite, *, now: float, expire_after: float
) -> tuple[WriteOutcome, int]:
    """Apply one prepared write; return its outcome and the row's current attempt."""
    current = conn.execute(
        "SELECT status, attempt, parent FROM units WHERE id = ?", (p.work_id,)
    ).fetchone()
    if current is None:
        raise UnknownWork(f"the ledger has no unit {p.work_id}")
    row_attempt = int(current["attempt"])
    if row_attempt != p.attempt:
        return WriteOutcome.STALE, row_attempt
    old = status_of(current["status"], p.work_id)
    entering_terminal = False
    if p.notification is not None and p.status == old and is_terminal(old):
        # The same end with its notice, at the same attempt, once more: its first
        # write landed though its writer never heard so (a COMMIT whose answer was
        # lost; ``settle``). The row and its notice are there; nothing is written twice.
        return WriteOutcome.WRITTEN, row_attempt
    if p.status is not None and p.status != old:
        if is_terminal(old):
            return WriteOutcome.IGNORED, row_attempt
        if not allowed(old, p.status):
            raise InvalidTransition(
                f"{p.work_id}: {old.value} -> {p.status.value} is not a lifecycle transition"
            )
        entering_terminal = is_terminal(p.status)
    if p.notification is not None and not entering_terminal:
        raise InvalidTransition(
            f"{p.work_id}: a notification is written only with the terminal transition, "
            f"and this write does not make the unit terminal"
        )
    columns = dict(p.columns)
    if entering_terminal:
        if columns.get("ended_at") is None:
            columns["ended_at"] = now
        if columns.get("expire_at") is None:
            columns["expire_at"] = float(columns["ended_at"]) + expire_after  # type: ignore[arg-type]
    if columns:
        conn.execute(_update_sql(tuple(columns)), (*columns.values(), p.work_id))
    if entering_terminal:
        assert p.status is not None
        _insert_notice(conn, p, current["parent"], now)
        # Its children's notices were for its process, which has ended: nobody
        # will take them now, so they count as acknowledged (the outbox stays
        # bounded; their units keep their own rows).
        conn.execute(
            "UPDATE notifications SET delivered_at = ?, claimed_by = NULL, claim_until = NULL "
            "WHERE parent = ? AND delivered_at IS NULL",
            (now, p.work_id),
        )
        # Its signals not yet taken count as consumed at its end: no attempt is left
        # to receive them (invariant: a resumed attempt gets only unconsumed ones).
        conn.execute(
            "UPDATE signals SET consumed_at = ? WHERE unit = ? AND consumed_at IS NULL",
            (now, p.work_id),
        )
    return WriteOutcome.WRITTEN, row_attempt


def landed(conn: Connection, batch: list[PreparedWrite]) -> bool:
    """Whether the transaction that made ``batch`` committed, read back after its COMMIT
    lost its answer: every write of a status finds its row at that status and attempt.

    Only the supervisor writes a unit's status, so a row that shows it is this
    write's doing (or was there before: then writing it again changes nothing).
    A batch that writes no status cannot tell; it is written again, which
    changes nothing either if it had landed.
    """
    told = [p for p in batch if p.status is not None]
    if not told:
        return False
    for p in told:
        assert p.status is not None
        row = conn.execute(
            "SELECT status, attempt FROM units WHERE id = ?", (p.work_id,)
        ).fetchone()
        if row is None or int(row["attempt"]) != p.attempt or row["status"] != p.status.value:
            return False
    return True


def _insert_notice(conn: Connection, p: PreparedWrite, parent: object, now: float) -> None:
    notice = p.notification
    if notice is None:
        row = conn.execute("SELECT * FROM units WHERE id = ?", (p.work_id,)).fetchone()
        notice = Notification.of(UnitRow.from_sql(row).to_record())
    elif notice.id != p.work_id or notice.status != p.status:
        raise InvalidTransition(
            f"{p.work_id}: the notification given is for {notice.id} {notice.status.value}, "
            f"not for this transition"
        )
    # A notice for a parent that has already ended is born acknowledged (see apply).
    parent_ended = parent is not None and _has_ended(conn, str(parent))
    # DO NOTHING: one row per (id, status) however often a transition is replayed.
    conn.execute(
        "INSERT INTO notifications (id, status, parent, payload, created_at, delivered_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (
            p.work_id,
            notice.status.value,
            parent,
            encode_notification(notice),
            now,
            now if parent_ended else None,
        ),
    )


def _has_ended(conn: Connection, work_id: str) -> bool:
    row = conn.execute("SELECT status FROM units WHERE id = ?", (work_id,)).fetchone()
    return row is not None and is_terminal(status_of(row["status"], work_id))


def status_of(value: object, work_id: str) -> Status:
    if isinstance(value, str) and value in _STATUSES:
        return Status(value)
    raise LedgerCorrupt(
        f"unit {work_id}: column status holds {value!r:.60}, which is not a status{REPAIR}"
    )


def record_columns(record: WorkRecord) -> dict[str, object]:
    """The columns a record mirrors (RECORD_COLUMNS), as the row holds them.

    Spelled out rather than looped over getattr: this runs for every
    transition, and the grouped-transition rate is a target (DESIGN §8). A
    test keeps it equal to RECORD_COLUMNS.
    """
    return {
        "status": record.status.value,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "output_path": record.output_path,
        "output_bytes": record.output_bytes,
        "output_tail": record.output_tail,
        "exit_code": record.exit_code,
        "signal": record.signal,
        "error": record.error,
        "reason": None if record.reason is None else record.reason.value,
        "pid": record.pid,
        "progress": record.progress,
        "progress_message": record.progress_message,
        "progress_at": record.progress_at,
        "progress_evidence": (
            None if record.evidence is None else orjson.dumps(record.evidence).decode()
        ),
    }


@functools.lru_cache(maxsize=64)
def _update_sql(names: tuple[str, ...]) -> str:
    assignments = ", ".join(f"{name} = ?" for name in names)
    return f"UPDATE units SET {assignments} WHERE id = ?"  # noqa: S608 - names are whitelisted


def _sql(value: object) -> object:
    """A Python value as its column holds it."""
    if isinstance(value, Status | Reason):
        return value.value
    if isinstance(value, bool):
        return int(value)
    return value
