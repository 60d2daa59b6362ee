"""The notification outbox: notices are claimed by one consumer, then acknowledged.

Rows are inserted only by :func:`workunits._ledger.writes.apply`, in the
terminal transition's own transaction (invariant 11). A consumer, in any
process, takes a notice in two steps:

1. ``claim``: one conditional update under the write lock marks the oldest
   unclaimed notice of a parent as the consumer's, so two consumers never
   both win it. The claim names the consumer's process (``_util.procid``) and a
   token of its own, and, for a consumer that is not a local process (the
   HTTP API's clients), a lease deadline.
2. ``ack``: marks it acknowledged (``delivered_at``), fully synced; no
   consumer in any process receives it again. ``release`` hands it back.

A claim whose process has exited, or whose lease has lapsed, is released by
the next ``claim`` (for any parent: a dead consumer of one parent's notices
must not wait for a claim on that same parent) or by the supervisor's periodic
``release_dead``, and the notice is delivered again with ``redelivered``
set: at-least-once delivery with a stable ID (the unit's), exactly-once for
consumers that acknowledge after acting.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from workunits._core import ids
from workunits._core.record import Notification
from workunits._core.retain import check_lease
from workunits._core.status import Status
from workunits._ledger import settle
from workunits._ledger.backend import Connection, Row
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import decode_notification
from workunits._util import procid


@dataclass(frozen=True, slots=True)
class Claimed:
    """A notice this consumer holds: ``token`` acknowledges, releases or renews it."""

    notice: Notification
    token: str


class Outbox:
    """The outbox (``notifications``) of one Ledger. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def undelivered(self, parent: str | None, limit: int | None = None) -> list[Notification]:
        """Notices for ``parent`` (None: the application root) not yet acknowledged, oldest
        first."""
        if parent is not None:
            ids.validate(parent)
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT id, payload FROM notifications WHERE parent IS ? AND delivered_at IS NULL "
                "ORDER BY seq LIMIT ?",
                (parent, -1 if limit is None else limit),
            ).fetchall()
        return [decode_notification(row["payload"], row["id"]) for row in rows]

    def claim(
        self, parent: str | None, *, owner: str | None = None, lease: float | None = None
    ) -> Claimed | None:
        """Claim the oldest unclaimed notice of ``parent`` for ``owner``; None if there is none.

        ``owner`` defaults to this process; a claim with a ``lease`` (seconds)
        lapses after it unless renewed, for an owner whose process cannot be
        watched; one without lasts as long as the owner's process. A COMMIT
        whose answer was lost is read back by the claim's token (``settle``): a
        claim that landed is handed over, not left held by a live process that
        does not know it holds it.
        """
        if lease is not None:
            lease = check_lease(lease)
        now = self._ctx.now()
        if parent is not None:
            ids.validate(parent)
        holder = owner or procid.this_process()
        token = f"{holder}#{secrets.token_hex(8)}"
        until = None if lease is None else now + lease
        db = self._ctx.db

        def write() -> Claimed | None:
            # NORMAL sync: a claim lost to a power cut only means the notice is
            # delivered again, which the contract allows.
            with db.write(durable=False) as conn:
                _release_dead(conn, now)
                row = conn.execute(
                    "SELECT seq, id, payload, deliveries FROM notifications "
                    "WHERE parent IS ? AND delivered_at IS NULL AND claimed_by IS NULL "
                    "ORDER BY seq LIMIT 1",
                    (parent,),
                ).fetchone()
                if row is None:
                    return None
                conn.execute(
                    "UPDATE notifications SET claimed_by = ?, claim_until = ?, "
                    "deliveries = deliveries + 1 WHERE seq = ?",
                    (token, until, row["seq"]),
                )
            return _claimed(row, token, earlier=int(row["deliveries"]))

        def landed(conn: Connection) -> Claimed | None:
            row = conn.execute(
                "SELECT seq, id, payload, deliveries FROM notifications WHERE claimed_by = ?",
                (token,),
            ).fetchone()
            return None if row is None else _claimed(row, token, earlier=int(row["deliveries"]) - 1)

        return settle.settled_write(
            db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"a claim of a notice by {holder}",
        )

    def release_dead(self) -> int:
        """Hand back every claim whose process has exited or whose lease has lapsed; how
        many."""
        now = self._ctx.now()
        with self._ctx.db.write(durable=False) as conn:
            return _release_dead(conn, now)

    def ack(self, work_id: str, token: str | None) -> bool:
        """Acknowledge the notice claimed with ``token`` (None: by whichever claim holds it);
        False if that claim is no longer held (or, with None, none is): it lapsed or was
        released.

        A COMMIT whose answer was lost is read back (``settle``): the notice
        acknowledged at this call's instant under that claim is this acknowledgement's.
        """
        ids.validate(work_id)
        now = self._ctx.now()
        held = "claimed_by IS NOT NULL" if token is None else "claimed_by = ?"
        return self._acknowledge(
            work_id,
            "UPDATE notifications SET delivered_at = ?, claim_until = NULL "  # noqa: S608
            f"WHERE id = ? AND {held} AND delivered_at IS NULL",
            (now, work_id) if token is None else (now, work_id, token),
            f"SELECT 1 FROM notifications WHERE id = ? AND {held} AND delivered_at = ?",  # noqa: S608
            (work_id, now) if token is None else (work_id, token, now),
        )

    def release(self, work_id: str, token: str) -> bool:
        """Hand the claimed notice back for delivery to any consumer; False if not held."""
        ids.validate(work_id)
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.execute(
                "UPDATE notifications SET claimed_by = NULL, claim_until = NULL "
                "WHERE id = ? AND claimed_by = ? AND delivered_at IS NULL",
                (work_id, token),
            )
            return cursor.rowcount == 1

    def renew(self, work_id: str, token: str, lease: float) -> bool:
        """Extend a leased claim to ``lease`` seconds from now; False if it is no longer
        held."""
        now, lease = self._ctx.now(), check_lease(lease)
        ids.validate(work_id)
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.execute(
                "UPDATE notifications SET claim_until = ? "
                "WHERE id = ? AND claimed_by = ? AND delivered_at IS NULL",
                (now + lease, work_id, token),
            )
            return cursor.rowcount == 1

    def mark_delivered(self, work_id: str, status: Status) -> bool:
        """Acknowledge ``(work_id, status)`` whoever holds it; True only for the call that did.

        For the supervisor's own consumers (a relayed child notice an agent has
        taken), which hold no claim in the ledger.
        """
        now = self._ctx.now()
        ids.validate(work_id)
        value = Status(status).value
        return self._acknowledge(
            work_id,
            "UPDATE notifications SET delivered_at = ?, claimed_by = NULL, "
            "claim_until = NULL WHERE id = ? AND status = ? AND delivered_at IS NULL",
            (now, work_id, value),
            "SELECT 1 FROM notifications WHERE id = ? AND status = ? AND delivered_at = ?",
            (work_id, value, now),
        )

    def _acknowledge(
        self,
        work_id: str,
        update: str,
        update_params: tuple[object, ...],
        found: str,
        found_params: tuple[object, ...],
    ) -> bool:
        """Synced and settled, as ``ack`` and ``mark_delivered`` must be; they differ in a match."""
        db = self._ctx.db

        def write() -> bool:
            # Fully synced: an acknowledged notice must never be delivered again.
            with db.write(durable=True) as conn:
                return conn.execute(update, update_params).rowcount == 1

        def landed(conn: Connection) -> bool | None:
            row = conn.execute(found, found_params).fetchone()
            return True if row is not None else None

        return settle.settled_write(
            db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"the acknowledgement of the notice of {work_id}",
            work_id=work_id,
        )

    def acknowledged_among(self, work_ids: Iterable[str]) -> set[str]:
        """Those of ``work_ids`` (ended units) whose notice is acknowledged or already gone."""
        work_ids = list(work_ids)
        if not work_ids:
            return set()
        waiting: set[str] = set()
        with self._ctx.db.read() as conn:
            for start in range(0, len(work_ids), 500):  # under SQLite's variable limit
                chunk = work_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT id FROM notifications WHERE delivered_at IS NULL AND id IN ({marks})",  # noqa: S608
                    chunk,
                ).fetchall()
                waiting.update(str(row[0]) for row in rows)
        return set(work_ids) - waiting

    def unclaimed_count(self, parent: str | None) -> int:
        """Notices of ``parent`` that wait for a consumer (neither claimed nor acknowledged)."""
        with self._ctx.db.read() as conn:
            row = conn.execute(
                "SELECT count(*) FROM notifications "
                "WHERE parent IS ? AND delivered_at IS NULL AND claimed_by IS NULL",
                (parent,),
            ).fetchone()
        return int(row[0])

    def size(self) -> int:
        """Notices not yet acknowledged: a count over the partial index of those alone
        (``notifications_undelivered``), so it costs what waits, not every notice kept
        (acknowledged ones stay until ``drop_acknowledged``; ``/metrics`` reads this)."""
        with self._ctx.db.read() as conn:
            row = conn.execute(
                "SELECT count(*) FROM notifications WHERE delivered_at IS NULL"
            ).fetchone()
        return int(row[0])

    def row_count(self) -> int:
        """Rows in the outbox, acknowledged or not (what ``make soak`` checks stays flat)."""
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT count(*) FROM notifications").fetchone()
        return int(row[0])

    def drop_acknowledged(self, older_than: float) -> int:
        """Delete notices acknowledged more than ``older_than`` seconds ago; how many went.

        Safe: a terminal write is never applied twice (a replay finds the unit
        terminal and is ignored), so a deleted notice cannot be written again.
        """
        before = self._ctx.now() - older_than
        with self._ctx.db.write(durable=False) as conn:
            return conn.execute(
                "DELETE FROM notifications WHERE delivered_at IS NOT NULL AND delivered_at < ?",
                (before,),
            ).rowcount


def _claimed(row: Row, token: str, *, earlier: int) -> Claimed:
    notice = decode_notification(row["payload"], row["id"])
    if earlier > 0:
        notice = dataclasses.replace(notice, redelivered=True)
    return Claimed(notice, token)


def _release_dead(conn: Connection, now: float) -> int:
    # Every parent's: the partial index holds only the claims still open, a few rows.
    claimed = conn.execute(
        "SELECT seq, claimed_by, claim_until FROM notifications INDEXED BY notifications_claimed "
        "WHERE claimed_by IS NOT NULL AND delivered_at IS NULL"
    ).fetchall()
    dead = [
        (row["seq"],)
        for row in claimed
        if (row["claim_until"] is not None and row["claim_until"] <= now)
        or procid.is_alive(str(row["claimed_by"]).split("#", 1)[0]) is False
    ]
    if dead:
        conn.executemany(
            "UPDATE notifications SET claimed_by = NULL, claim_until = NULL WHERE seq = ?", dead
        )
    return len(dead)
