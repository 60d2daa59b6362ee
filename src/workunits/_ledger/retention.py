"""Retention: ended units expire to a small row, and much later are forgotten.

Expiry drops what is heavy and no longer needed -- spec, result, cause,
output tail, checkpoint -- and keeps how the unit ended, so the ledger
still answers for it, with its status shown as ``expired`` (invariant 8),
never "unknown" or "pending". Forgetting deletes the row; the ID is unknown
afterwards.
"""

from __future__ import annotations

from workunits._ledger import retains
from workunits._ledger.backend import Connection, Database, Row
from workunits._ledger.rows import IN_TERMINAL, TERMINAL

# What expiry drops: everything heavy, keeping how the unit ended.
_DROP = (
    "SET expired_at = ?, spec = NULL, spec_mac = NULL, spec_versions = NULL, "
    "result = NULL, result_format = NULL, result_mac = NULL, result_versions = NULL, "
    "cause = NULL, cause_format = NULL, cause_mac = NULL, cause_versions = NULL, "
    "output_tail = NULL, checkpoint = NULL, checkpoint_mac = NULL, progress_message = NULL, "
    "spec_file = NULL, result_file = NULL, checkpoint_file = NULL"
)
# The value store files the rows being expired refer to, deleted after the commit.
_FILES = "spec_file, result_file, checkpoint_file"
_HEAVY_BYTES = (
    "coalesce(length(spec), 0) + coalesce(length(result), 0) + coalesce(length(cause), 0) "
    "+ coalesce(length(output_tail), 0) + coalesce(length(checkpoint), 0)"
)


# A unit a live lease retains does not expire; `retains.prune` first drops lapsed leases.
_UNRETAINED = "NOT EXISTS (SELECT 1 FROM retains WHERE retains.unit = units.id)"


def expire(db: Database, now: float) -> tuple[list[str], list[str]]:
    """Expire ended, unretained units whose ``expire_at`` has passed.

    Returns their IDs and the value store files they referred to (to delete).
    """
    # INDEXED BY: without statistics SQLite would pick the status index and
    # visit every ended unit; units_expire holds only those due.
    where = (
        f"WHERE expired_at IS NULL AND expire_at <= ? AND {_UNRETAINED} AND status IN {IN_TERMINAL}"
    )
    # NORMAL sync: an expiry lost to a power cut is simply done again. The
    # SELECT and the UPDATE see the same rows: the write lock is held for both.
    with db.write(durable=False) as conn:
        retains.prune(conn, now)
        rows = conn.execute(
            f"SELECT id, {_FILES} FROM units INDEXED BY units_expire {where}",  # noqa: S608
            (now, *TERMINAL),
        ).fetchall()
        if rows:
            conn.execute(
                f"UPDATE units INDEXED BY units_expire {_DROP} {where}", (now, now, *TERMINAL)
            )
            _drop_notices_of_expired(conn)
        return [str(r[0]) for r in rows], _files_of(rows)


def expire_ended_before(db: Database, now: float, cut: float) -> tuple[list[str], int, list[str]]:
    """Expire ended, unretained units that are due or ended at or before ``cut``.

    For ``gc --older-than``: a person asks for room now, whatever each unit's
    ``expire_at`` says. Returns the units expired and how many bytes of spec,
    result, cause, output tail and checkpoint they dropped from the ledger,
    and the value store files they referred to (to delete).
    """
    where = (
        f"WHERE expired_at IS NULL AND {_UNRETAINED} AND status IN {IN_TERMINAL} "
        "AND (ended_at <= ? OR expire_at <= ?)"
    )
    params = (*TERMINAL, cut, now)
    with db.write(durable=False) as conn:
        retains.prune(conn, now)
        rows = conn.execute(
            f"SELECT id, {_FILES}, {_HEAVY_BYTES} FROM units {where}",  # noqa: S608
            params,
        ).fetchall()
        if rows:
            conn.execute(f"UPDATE units {_DROP} {where}", (now, *params))
            _drop_notices_of_expired(conn)
        ids = [str(r[0]) for r in rows]
        return ids, sum(int(r[4]) for r in rows), _files_of(rows)


def _files_of(rows: list[Row]) -> list[str]:
    return [str(name) for r in rows for name in (r[1], r[2], r[3]) if name is not None]


def forget(db: Database, cut: float) -> int:
    """Delete units expired before ``cut``, and bookkeeping that ended before it
    (finished requests, closed sessions, schedules' firings but each one's latest).

    Unacknowledged notices of units that have not expired stay whatever their
    age: a parent may still come for them. Returns how many unit rows were deleted.
    """
    with db.write(durable=False) as conn:
        deleted = conn.execute(
            "DELETE FROM units WHERE expired_at IS NOT NULL AND expired_at <= ?", (cut,)
        ).rowcount
        conn.execute("DELETE FROM notifications WHERE delivered_at IS NOT NULL")
        _drop_notices_of_expired(conn)
        conn.execute("DELETE FROM requests WHERE done_at IS NOT NULL AND done_at <= ?", (cut,))
        conn.execute("DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at <= ?", (cut,))
        # A schedule's record of firings, but its latest (what listings show as `last`).
        conn.execute(
            "DELETE FROM schedule_firings WHERE recorded_at <= ? AND due_at < "
            "(SELECT max(f.due_at) FROM schedule_firings f "
            "WHERE f.schedule = schedule_firings.schedule)",
            (cut,),
        )
    return deleted


def _drop_notices_of_expired(conn: Connection) -> None:
    """An expired unit's notice goes with it: nobody can act on a unit the ledger forgot."""
    conn.execute(
        "DELETE FROM notifications WHERE id IN "
        "(SELECT id FROM units WHERE expired_at IS NOT NULL) OR id NOT IN (SELECT id FROM units)"
    )
    # Its signals too (consumed at its end at the latest).
    conn.execute(
        "DELETE FROM signals WHERE unit IN "
        "(SELECT id FROM units WHERE expired_at IS NOT NULL) OR unit NOT IN (SELECT id FROM units)"
    )
