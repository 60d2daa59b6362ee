"""Sessions: one row per supervisor run, with a heartbeat.

The supervisor lock (``lock.py``) is what guarantees one live supervisor per
state dir; the session rows say which run started which unit, so that the
next run can find the units a dead one left ``running`` and resume or fail
them (DESIGN §4, recovery).
"""

from __future__ import annotations

from dataclasses import dataclass

from workunits import _ids
from workunits._errors import InvalidWorkId, LedgerError
from workunits._ledger.backend import Database
from workunits._ledger.rows import UnitRow
from workunits._status import Status


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    pid: int
    started_at: float
    heartbeat_at: float
    ended_at: float | None


def validate(session_id: object) -> str:
    value = _ids.validate(session_id)
    if value[0] != _ids.SESSION_PREFIX:
        raise InvalidWorkId(f"{value!r} is not a session ID (they start with 's')")
    return value


def open_session(db: Database, session_id: str, pid: int, now: float) -> None:
    validate(session_id)
    with db.write(durable=True) as conn:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
            raise LedgerError(f"session {session_id} was opened before; mint a new session ID")
        conn.execute(
            "INSERT INTO sessions (id, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?)",
            (session_id, pid, now, now),
        )


def heartbeat(db: Database, session_id: str, now: float) -> None:
    _touch(db, session_id, "heartbeat_at", now, durable=False)


def close_session(db: Database, session_id: str, now: float) -> None:
    _touch(db, session_id, "ended_at", now, durable=True)


def _touch(db: Database, session_id: str, column: str, now: float, *, durable: bool) -> None:
    validate(session_id)
    with db.write(durable=durable) as conn:
        cursor = conn.execute(
            f"UPDATE sessions SET {column} = ? WHERE id = ?",  # noqa: S608 - a fixed column name
            (now, session_id),
        )
        if cursor.rowcount != 1:
            raise LedgerError(f"no session {session_id} in the ledger; open_session() first")


def get(db: Database, session_id: str) -> Session | None:
    validate(session_id)
    with db.read() as conn:
        row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return None if row is None else Session(**dict(row))


def live(db: Database, now: float, stale_after: float) -> list[Session]:
    """Sessions not closed whose heartbeat is younger than ``stale_after`` seconds."""
    with db.read() as conn:
        rows = conn.execute(
            "SELECT * FROM sessions WHERE ended_at IS NULL AND heartbeat_at >= ? "
            "ORDER BY started_at, id",
            (now - stale_after,),
        ).fetchall()
    return [Session(**dict(row)) for row in rows]


def units_of_dead_sessions(
    db: Database, current: str, now: float, stale_after: float | None
) -> list[UnitRow]:
    """``running`` units whose session is not ``current`` and not live.

    With ``stale_after=None`` every other session counts as dead: right for a
    caller holding the supervisor lock, since no other supervisor can run.
    Otherwise a session heard from within ``stale_after`` seconds is live.
    """
    validate(current)
    query = "SELECT * FROM units WHERE status = ? AND session IS NOT ?"
    params: tuple[object, ...] = (Status.RUNNING.value, current)
    if stale_after is not None:
        query += (
            " AND (session IS NULL OR session NOT IN (SELECT id FROM sessions "
            "WHERE ended_at IS NULL AND heartbeat_at >= ?))"
        )
        params += (now - stale_after,)
    with db.read() as conn:
        rows = conn.execute(query + " ORDER BY created_at, id", params).fetchall()
    return [UnitRow.from_sql(row) for row in rows]
