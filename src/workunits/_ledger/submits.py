"""Submits: the idempotency check and the insert, inside one write transaction.

Invariant 12 rests on both running under the same write lock (``backend``):
the key is looked up and, when absent, the row inserted before any other
process can look for the same key. The insert also does nothing on a
conflict, and a key found taken then is looked up again: a backend whose
lock does not cover every writer still makes one unit per key.
"""

from __future__ import annotations

from collections.abc import Sequence

from workunits._core.errors import IdempotencyConflict, LedgerError
from workunits._ledger.backend import Connection
from workunits._ledger.rows import NewUnit, UnitRow


def insert(
    conn: Connection, new: NewUnit, digest: str
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
        found = _by_key(conn, new.key, digest)
        if found is not None:
            return found
    if conn.execute(INSERT_UNIT, insert_params(new, digest)).rowcount == 1:
        return UnitRow.fresh(new, digest), True
    found = None if new.key is None else _by_key(conn, new.key, digest)
    if found is None:
        raise LedgerError(f"unit ID {new.id} is already in the ledger; mint another")
    return found


def _by_key(
    conn: Connection, key: str, digest: str
) -> tuple[UnitRow, bool] | IdempotencyConflict | None:
    found = conn.execute("SELECT * FROM units WHERE key = ?", (key,)).fetchone()
    if found is None:
        return None
    existing = UnitRow.from_sql(found)
    if existing.spec_hash != digest:
        return IdempotencyConflict(
            f"key {key!r} belongs to unit {existing.id} ({existing.kind}, "
            f"{existing.shown_status}), submitted with other arguments; use "
            f"another key, or resubmit the very same call to get {existing.id}"
        )
    return existing, False


def read_back(
    conn: Connection, ready: Sequence[tuple[NewUnit, str]]
) -> list[tuple[UnitRow, bool] | IdempotencyConflict] | None:
    """After a COMMIT that lost its answer: what ``insert`` answered for each of ``ready``,
    read back by the IDs minted for them; None when none of them is in the ledger.

    The transaction was one: if any of its units is there, it committed, and a
    unit that is not was answered by its key (found, or a conflict). If none is,
    it did not commit, or inserted nothing; running it again is then safe.
    """
    ids = [new.id for new, _ in ready]
    marks = ", ".join("?" * len(ids))
    rows = {
        str(row["id"]): row
        for row in conn.execute(f"SELECT * FROM units WHERE id IN ({marks})", ids).fetchall()  # noqa: S608
    }
    if not rows:
        return None
    out: list[tuple[UnitRow, bool] | IdempotencyConflict] = []
    for new, digest in ready:
        row = rows.get(new.id)
        if row is not None:
            out.append((UnitRow.from_sql(row), True))
            continue
        found = None if new.key is None else _by_key(conn, new.key, digest)
        if found is None:
            raise LedgerError(
                f"unit {new.id} was submitted in the transaction that wrote {next(iter(rows))}, "
                f"yet is neither in the ledger nor found by its key"
            )
        out.append(found)
    return out


INSERT_UNIT = (
    "INSERT INTO units (id, kind, status, parent, description, key, spec_hash, spec, "
    "spec_format, spec_mac, spec_versions, max_attempts, resumable, created_at, "
    "session, output_path, started_at, spec_file, retry_policy, retry_of, stall_after, "
    "not_before, sandbox) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT DO NOTHING"
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
        new.policy_json,
        new.retry_of,
        new.stall_after,
        new.not_before,
        new.sandbox_json,
    )
