"""Retention: ended units expire to a small row, and much later are forgotten.

Expiry drops what is heavy and no longer needed -- spec, result, cause,
output tail, checkpoint -- and keeps how the unit ended, so the ledger
still answers for it, with its status shown as ``expired`` (invariant 8),
never "unknown" or "pending". Forgetting deletes the row; the ID is unknown
afterwards.
"""

from __future__ import annotations

from workunits.ledger._db import Database
from workunits.ledger.rows import IN_TERMINAL, TERMINAL


def expire(db: Database, now: float) -> int:
    """Expire ended, unretained units whose ``expire_at`` has passed; return how many."""
    # NORMAL sync: an expiry lost to a power cut is simply done again.
    with db.write(durable=False) as conn:
        cursor = conn.execute(
            # INDEXED BY: without statistics SQLite would pick the status index
            # and visit every ended unit; units_expire holds only those due.
            "UPDATE units INDEXED BY units_expire "  # noqa: S608
            "SET expired_at = ?, spec = NULL, spec_mac = NULL, spec_versions = NULL, "
            "result = NULL, result_format = NULL, result_mac = NULL, result_versions = NULL, "
            "cause = NULL, cause_format = NULL, cause_mac = NULL, cause_versions = NULL, "
            "output_tail = NULL, checkpoint = NULL, progress_message = NULL "
            "WHERE expired_at IS NULL AND expire_at <= ? AND retain = 0 "
            f"AND status IN {IN_TERMINAL}",
            (now, now, *TERMINAL),
        )
        return cursor.rowcount


def forget(db: Database, cut: float) -> int:
    """Delete units expired before ``cut``, and bookkeeping that ended before it.

    Undelivered notices stay whatever their age: a parent may still come for
    them. Returns how many unit rows were deleted.
    """
    with db.write(durable=False) as conn:
        deleted = conn.execute(
            "DELETE FROM units WHERE expired_at IS NOT NULL AND expired_at <= ?", (cut,)
        ).rowcount
        conn.execute(
            "DELETE FROM notifications WHERE delivered_at IS NOT NULL "
            "AND id NOT IN (SELECT id FROM units)"
        )
        conn.execute("DELETE FROM requests WHERE done_at IS NOT NULL AND done_at <= ?", (cut,))
        conn.execute("DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at <= ?", (cut,))
    return deleted
