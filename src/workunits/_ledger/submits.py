"""Submits: the idempotency check and the insert, inside one write transaction.

Invariant 12 rests on both running under the same ``BEGIN IMMEDIATE`` lock:
the key is looked up and, when absent, the row inserted before any other
process can look for the same key.
"""

from __future__ import annotations

import sqlite3

from workunits._errors import IdempotencyConflict, LedgerError
from workunits._ledger.rows import NewUnit, UnitRow


def insert(
    conn: sqlite3.Connection, new: NewUnit, digest: str
) -> tuple[UnitRow, bool] | IdempotencyConflict:
    """Inside a write transaction: the unit with ``new``'s key, or ``new`` inserted.

    A unit started by ``retry(id)`` (``retry_of``) takes the failed unit's key
    in the same transaction, so the key names one unit at any moment
    (invariant 12); a second retry of the same unit returns the first one's.
    """
    if new.retry_of is not None:
        again = conn.execute("SELECT * FROM units WHERE retry_of = ?", (new.retry_of,)).fetchone()
        if again is not None:
            return UnitRow.from_sql(again), False
        if new.key is not None:
            conn.execute(
                "UPDATE units SET key = NULL WHERE id = ? AND key = ?", (new.retry_of, new.key)
            )
    if new.key is not None:
        found = conn.execute("SELECT * FROM units WHERE key = ?", (new.key,)).fetchone()
        if found is not None:
            existing = UnitRow.from_sql(found)
            if existing.spec_hash != digest:
                return IdempotencyConflict(
                    f"key {new.key!r} belongs to unit {existing.id} ({existing.kind}, "
                    f"{existing.shown_status}), submitted with other arguments; use "
                    f"another key, or resubmit the very same call to get {existing.id}"
                )
            return existing, False
    try:
        conn.execute(INSERT_UNIT, insert_params(new, digest))
    except sqlite3.IntegrityError:
        # The key was checked above under the write lock: only the ID can collide.
        raise LedgerError(f"unit ID {new.id} is already in the ledger; mint another") from None
    return UnitRow.fresh(new, digest), True


INSERT_UNIT = (
    "INSERT INTO units (id, kind, status, parent, description, key, spec_hash, spec, "
    "spec_format, spec_mac, spec_versions, max_attempts, resumable, created_at, "
    "session, output_path, started_at, spec_file, retry_policy, retry_of, stall_after) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert_params(new: NewUnit, digest: str) -> tuple[object, ...]:
    return (
        new.id,
        new.kind,
        new.status.value,
        new.parent,
        new.description,
        new.key,
        digest,
        # Empty bytes with no file: a spec the Ledger chose not to keep (NULL).
        new.spec.data if new.spec.data or new.spec.file is not None else None,
        new.spec.format,
        new.spec.mac,
        new.spec.versions,
        new.max_attempts,
        int(new.resumable),
        new.created_at,
        new.session,
        new.output_path,
        new.started_at,
        new.spec.file,
        None if new.retry is None else new.retry.to_json().decode(),
        new.retry_of,
        new.stall_after,
    )
