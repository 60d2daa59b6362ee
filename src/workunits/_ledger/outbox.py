"""The notification outbox: read undelivered notices, mark them delivered.

Rows are inserted only by :func:`workunits._ledger.writes.apply`, in the
terminal transition's own transaction. Delivery is at least once: a consumer
reads :func:`undelivered`, hands each notice on, then marks it. A crash
between the two re-delivers it after a restart, and ``(id, status)`` -- unique
in the table -- is the key a consumer deduplicates by. ``mark_delivered``
returns True only for the call that marked it, so it can also serve as that
dedup gate.
"""

from __future__ import annotations

from workunits import _ids
from workunits._ledger._db import Database
from workunits._ledger.rows import decode_notification
from workunits._record import Notification
from workunits._status import Status


def undelivered(db: Database, parent: str | None, limit: int | None = None) -> list[Notification]:
    """Notices for ``parent`` (None: the application root) not yet marked, oldest first."""
    if parent is not None:
        _ids.validate(parent)
    with db.read() as conn:
        rows = conn.execute(
            "SELECT id, payload FROM notifications WHERE parent IS ? AND delivered_at IS NULL "
            "ORDER BY seq LIMIT ?",
            (parent, -1 if limit is None else limit),
        ).fetchall()
    return [decode_notification(row["payload"], row["id"]) for row in rows]


def mark_delivered(db: Database, work_id: str, status: Status, now: float) -> bool:
    """Mark ``(work_id, status)`` delivered; True only for the call that marked it."""
    _ids.validate(work_id)
    # NORMAL sync is enough: a mark lost to a power cut means one more
    # delivery, which consumers deduplicate by (id, status).
    with db.write(durable=False) as conn:
        cursor = conn.execute(
            "UPDATE notifications SET delivered_at = ? "
            "WHERE id = ? AND status = ? AND delivered_at IS NULL",
            (now, work_id, Status(status).value),
        )
        return cursor.rowcount == 1
