"""Claims: which supervisor starts a pending unit that no session owns.

Pending rows with no session (``session`` NULL) are the cluster's queue: a
client's submit (``wu.connect(...).shell(...)``), or the pending units of a
session that was taken over (``sessions.take_over`` hands them back). A
supervisor claims some by setting ``session`` to its own; only then does it
start them, so each is started by exactly one supervisor. It claims no more
of a kind than it has free slots for (its ``concurrency``), so a busy
supervisor does not hoard units an idle one could run.

On PostgreSQL the rows are picked with ``FOR UPDATE SKIP LOCKED``. Today every
write transaction also holds the ledger's advisory write lock (``postgres``),
so claims are serialised anyway and SKIP LOCKED never skips; the row locks
make the claim correct on its own, but it stays under the write lock because
the session fence (``fence``) relies on that lock: a claim outside it could
commit just after the takeover of its (lapsed) session and leave units owned
by a session nobody will take over again. Moving claims out would need the
fence to hold the session row ``FOR SHARE`` against the takeover's UPDATE.
"""

from __future__ import annotations

from collections.abc import Mapping

from workunits._core.status import Status
from workunits._ledger import settle, unreadable
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import UnitRow
from workunits._ledger.sessions import validate as validate_session
from workunits._ledger.unreadable import Unreadable

_PICK = "SELECT * FROM units WHERE status = ? AND session IS NULL"


class Claims:
    """Which supervisor starts a pending unit no session owns, for one Ledger.

    Every method runs in the calling thread.
    """

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def claim(self, me: str, free: Mapping[str, int], batch: int) -> list[UnitRow | Unreadable]:
        """Claim the oldest unowned pending units for session ``me``; return their rows.

        ``free``: kinds with a concurrency limit, and how many more this
        supervisor can run now (0: none is claimed). Other kinds: up to ``batch``.
        A row that does not decode, or whose stored values fail their check, is
        claimed too, and returned as an Unreadable (see ``unreadable``): left in
        the queue, it would be the oldest pending row for ever, take a slot of
        every claim and make every tick's look find work and open a synced
        write. Claimed, it leaves the queue with nothing else in it changed;
        when this session is taken over it goes back to the queue, and the next
        claim finds it again, repaired or not. A poll that found nothing skips
        its read while the ledger has not changed (``polls``).
        """
        validate_session(me)
        rows = self._ctx.polls.poll(
            ("claims", me, tuple(sorted(free.items())), batch),
            lambda: self._claim(me, free, batch),
        )
        return self._ctx.checked_each(rows)

    def _claim(self, me: str, free: Mapping[str, int], batch: int) -> list[UnitRow | Unreadable]:
        db = self._ctx.db
        lock = " FOR UPDATE SKIP LOCKED" if db.row_locks else ""
        limited = sorted(free)
        picks: list[tuple[str, tuple[object, ...]]] = [
            (" AND kind = ?", (kind, free[kind])) for kind in limited if free[kind] > 0
        ]
        if limited:
            picks.append((f" AND kind NOT IN ({', '.join('?' * len(limited))})", (*limited, batch)))
        else:
            picks.append(("", (batch,)))
        # A cheap look first, in a read: on most ticks there is nothing to claim, and
        # a write transaction would take the ledger's write lock (every host's, on
        # PostgreSQL) and a synced commit to find that out.
        with db.read() as conn:
            if conn.execute(_PICK + " LIMIT 1", (Status.PENDING.value,)).fetchone() is None:
                return []
        claimed: list[UnitRow | Unreadable] = []

        def write() -> list[UnitRow | Unreadable]:
            claimed.clear()
            with db.write(durable=True) as conn:
                for where, params in picks:
                    # PostgreSQL takes FOR UPDATE after ORDER BY and LIMIT.
                    sql = f"{_PICK}{where} ORDER BY created_at, id LIMIT ?{lock}"
                    rows = conn.execute(sql, (Status.PENDING.value, *params)).fetchall()
                    claimed.extend(unreadable.decode(row) for row in rows)
                if claimed:
                    conn.executemany(
                        "UPDATE units SET session = ? WHERE id = ?", [(me, r.id) for r in claimed]
                    )
            return list(claimed)

        def landed(conn: Connection) -> list[UnitRow | Unreadable] | None:
            """The rows the lost COMMIT claimed: those picked that now name ``me``. Pending
            rows name a session only once claimed, and only this claim names ``me`` on them."""
            if not claimed:
                return []
            marks = ", ".join("?" * len(claimed))
            ids = [r.id for r in claimed]
            rows = conn.execute(
                f"SELECT * FROM units WHERE id IN ({marks}) AND session = ? AND status = ? "  # noqa: S608
                "ORDER BY created_at, id",
                (*ids, me, Status.PENDING.value),
            ).fetchall()
            return [unreadable.decode(row) for row in rows] or None

        return settle.settled_write(
            db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"a claim of pending units by {me}",
        )

    def release_unheld(self, me: str, *, exclusive: bool) -> list[str]:
        """Hand back to the queue (``session`` NULL) pending units claimed by a dead session.

        A claim is a session's promise to start the unit. A session that ended or
        was taken over keeps no promise, and a takeover frees only the rows it finds
        at that moment: a claim that landed later (its COMMIT's answer lost) would
        keep its unit pending for ever. A session whose lease merely lapsed is not
        dead yet -- it may still start what it claimed, until a takeover fences it
        -- so its rows wait for that takeover, which hands them back itself.
        ``exclusive``: the caller holds the state dir's lock (SQLite), so every
        other session is dead. The IDs handed back.
        """
        validate_session(me)
        db = self._ctx.db
        dead = (
            ""
            if exclusive
            else " AND session NOT IN (SELECT id FROM sessions WHERE recovered_by IS NULL "
            "AND ended_at IS NULL)"
        )
        params = (Status.PENDING.value, me)
        pick = (
            "SELECT id FROM units WHERE status = ? AND session IS NOT NULL "  # noqa: S608 - fixed text
            f"AND session <> ?{dead}"
        )
        with db.read() as conn:
            if conn.execute(pick + " LIMIT 1", params).fetchone() is None:
                return []  # the common case: a read, not the ledger's write lock
        with db.write(durable=True) as conn:
            ids = [str(row[0]) for row in conn.execute(pick, params).fetchall()]
            if ids:
                conn.executemany(
                    "UPDATE units SET session = NULL WHERE id = ? AND status = ?",
                    [(work_id, Status.PENDING.value) for work_id in ids],
                )
        return ids
