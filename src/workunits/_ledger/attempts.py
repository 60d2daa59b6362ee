"""Retries in the ledger: a failed attempt's schedule, and the next attempt's start.

Between attempts a unit stays ``running`` (no status change, no notice): its
row says when the next attempt is due (``retry_at``) and lists the attempts
that failed (``attempts_log``). Both writes are fenced by the attempt
(invariant 13) and fully synced, so a supervisor SIGKILLed while a unit waits
finds the schedule and continues it (``Ledger.units_of_dead_sessions``).
"""

from __future__ import annotations

import sqlite3

from workunits._core.errors import InvalidTransition, StaleAttempt, UnknownWork
from workunits._core.retry import Attempt, attempts_from_json, attempts_to_json
from workunits._core.status import Status
from workunits._ledger.backend import Connection, Database
from workunits._ledger.writes import status_of


def schedule(
    db: Database, work_id: str, attempt: int, failed: Attempt, message: str
) -> tuple[Attempt, ...]:
    """Record that ``attempt`` failed and when the next is due; the attempts so far.

    StaleAttempt when another attempt owns the row; InvalidTransition when the
    unit is not running (it ended: nothing is retried after the end).
    """
    with db.write(durable=True) as conn:
        row = _running(conn, work_id, attempt)
        log = attempts_from_json(row["attempts_log"]) if row["attempts_log"] else ()
        log = (*log, failed)
        conn.execute(
            "UPDATE units SET retry_at = ?, attempts_log = ?, pid = NULL, progress_message = ?, "
            "progress_at = ? WHERE id = ?",
            (failed.retry_at, attempts_to_json(log).decode(), message, failed.ended_at, work_id),
        )
    return log


def begin(db: Database, work_id: str, session: str, expected: int) -> int:
    """The next attempt of a unit waiting between attempts starts under ``session``.

    Returns the new attempt number. From here on a write of the failed attempt
    is stale.
    """
    with db.write(durable=True) as conn:
        row = _running(conn, work_id, expected)
        if row["retry_at"] is None:
            raise InvalidTransition(f"{work_id} is not waiting for its next attempt")
        if expected >= int(row["max_attempts"]):
            raise InvalidTransition(
                f"{work_id} has used {expected} of {row['max_attempts']} attempts"
            )
        conn.execute(
            "UPDATE units SET attempt = ?, retry_at = NULL, session = ?, pid = NULL WHERE id = ?",
            (expected + 1, session, work_id),
        )
    return expected + 1


def retried_by(db: Database, work_id: str) -> str | None:
    """The unit ``retry(work_id)`` started, if any."""
    with db.read() as conn:
        row = conn.execute("SELECT id FROM units WHERE retry_of = ?", (work_id,)).fetchone()
    return None if row is None else str(row["id"])


def _running(conn: Connection, work_id: str, attempt: int) -> sqlite3.Row:
    row: sqlite3.Row | None = conn.execute(
        "SELECT status, attempt, max_attempts, retry_at, attempts_log FROM units WHERE id = ?",
        (work_id,),
    ).fetchone()
    if row is None:
        raise UnknownWork(f"the ledger has no unit {work_id}")
    if int(row["attempt"]) != attempt:
        raise StaleAttempt(work_id, attempt, int(row["attempt"]))
    status = status_of(row["status"], work_id)
    if status != Status.RUNNING:
        raise InvalidTransition(f"{work_id} is {status.value}; only a running unit is retried")
    return row
