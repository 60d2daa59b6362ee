"""Sessions: one row per supervisor run, held as a lease it renews.

The supervisor lock (``lock.py``) guarantees one live supervisor per state
dir; the session rows say which run owns which unit, so that another run can
find the units a dead one left and resume or fail them (DESIGN §4, recovery).

Several supervisors may share one (PostgreSQL) ledger, each with its own
state dir. Then a session is a lease: its heartbeat renews it, and once it
has not been renewed for ``lease`` seconds any other live supervisor may take
it over -- one conditional UPDATE on the session row (``recovered_by``), so
exactly one wins. In the same transaction the winner takes the dead session's
running units (it resumes or fails them) and hands its pending ones back to
the cluster (``session`` NULL: any supervisor with a free slot claims them).

Fencing by session (invariant 13, across supervisors): once taken over, a
session writes nothing more. ``check_not_taken`` runs at the start of every
write transaction of a supervisor's ledger (``fence``), under the ledger's
write lock, so a write that follows the takeover in the lock's order is
refused, and one that precedes it is seen by the winner.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from workunits._core import ids
from workunits._core.errors import InvalidWorkId, LedgerError, SessionLost, SpecError
from workunits._core.status import Status
from workunits._ledger import settle, unreadable
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import UnitRow
from workunits._ledger.unreadable import Unreadable


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    pid: int
    started_at: float
    heartbeat_at: float
    ended_at: float | None
    lease: float | None = None  # None: opened before leases; DEFAULT_LEASE applies
    recovered_by: str | None = None
    recovered_at: float | None = None
    # Where the session's HTTP API is reached from other hosts (``serve --advertise``).
    url: str | None = None


DEFAULT_LEASE = 10.0
# Heartbeats come four times per lease (and at most each second), between ticks:
# shorter leases than this lapse on a busy machine while nothing is wrong.
MIN_LEASE = 0.5


def validate(session_id: object) -> str:
    value = ids.validate(session_id)
    if value[0] != ids.SESSION_PREFIX:
        raise InvalidWorkId(f"{value!r} is not a session ID (they start with 's')")
    return value


def check_advertise(url: object) -> str:
    """``url`` when it is an ``http(s)://host[:port]`` base URL; SpecError otherwise."""
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise SpecError(
            f"advertise must be the http(s)://host:port this supervisor's HTTP API is reached "
            f"at from other hosts (no user, query or fragment), got {url!r}"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise SpecError(f"advertise has a port that is not a number: {url!r}") from None
    return str(url).rstrip("/")


def check_not_taken(conn: Connection, session_id: str) -> None:
    """Inside a write transaction: SessionLost if ``session_id`` was taken over."""
    row = conn.execute(
        "SELECT recovered_by, recovered_at FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is not None and row["recovered_by"] is not None:
        raise SessionLost(
            f"session {session_id} was taken over by session {row['recovered_by']} "
            f"(its lease lapsed: no heartbeat in time); nothing more it writes is kept. "
            f"Start a new supervisor"
        )


class Sessions:
    """The sessions of one Ledger: supervisor runs, their leases, and takeovers.

    Every method runs in the calling thread.
    """

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def open(self, session_id: str, pid: int, *, lease: float | None = None) -> None:
        """Open ``session_id`` for the supervisor process ``pid``, held as a ``lease``."""
        now = self._ctx.now()
        validate(session_id)
        with self._ctx.db.write(durable=True) as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                raise LedgerError(f"session {session_id} was opened before; mint a new session ID")
            conn.execute(
                "INSERT INTO sessions (id, pid, started_at, heartbeat_at, lease) "
                "VALUES (?, ?, ?, ?, ?)",
                (session_id, pid, now, now, lease),
            )

    def advertise(self, session_id: str, url: str) -> None:
        """Record the URL ``session_id``'s HTTP API is reached at from other hosts
        (``serve --advertise``)."""
        validate(session_id)
        with self._ctx.db.write(durable=True) as conn:
            cursor = conn.execute(
                "UPDATE sessions SET url = ? WHERE id = ?", (check_advertise(url), session_id)
            )
            if cursor.rowcount != 1:
                raise LedgerError(
                    f"no session {session_id} in the ledger; open it first (sessions.open)"
                )

    def heartbeat(self, session_id: str) -> None:
        """Renew the session's lease; SessionLost when another supervisor took it over."""
        now = self._ctx.now()
        validate(session_id)
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.execute(
                "UPDATE sessions SET heartbeat_at = ? WHERE id = ? AND recovered_by IS NULL",
                (now, session_id),
            )
            if cursor.rowcount != 1:
                check_not_taken(conn, session_id)
                raise LedgerError(
                    f"no session {session_id} in the ledger; open it first (sessions.open)"
                )

    def take_over(
        self, me: str, *, exclusive: bool, default_lease: float = DEFAULT_LEASE
    ) -> tuple[list[str], list[UnitRow | Unreadable]]:
        """Take over every session whose lease lapsed (or that ended); its running units.

        One transaction: the sessions won (a conditional UPDATE, so of two
        supervisors trying at once exactly one wins each), their running units
        moved to ``me`` (the caller resumes or fails them: see recovery), and
        their pending units handed back (``session`` NULL) for any supervisor to
        claim. ``exclusive``: the caller holds the only supervisor lock there can
        be (SQLite), so every other session is dead, lease or not, and running
        units that name no session are taken too.

        Rows are decoded one by one: one that does not decode, or whose stored
        values fail their check, is an Unreadable (see ``unreadable``) and the
        others are taken all the same. It is moved to ``me`` too, and nothing
        else in it changes: whoever takes ``me`` over later (the next
        supervisor, on SQLite) finds it again, repaired or not. A COMMIT whose
        answer was lost is read back (``settle``): the sessions this takeover
        marked, and the units it moved.
        """
        now = self._ctx.now()
        validate(me)
        lapsed = (
            ""
            if exclusive
            else " AND (ended_at IS NOT NULL OR heartbeat_at < ? - coalesce(lease, ?))"
        )
        params: tuple[object, ...] = (me, now, me)
        if not exclusive:
            params += (now, default_lease)
        db = self._ctx.db
        taken: list[UnitRow | Unreadable] = []

        def write() -> tuple[list[str], list[UnitRow | Unreadable]]:
            taken.clear()
            with db.write(durable=True) as conn:
                won = [
                    str(row[0])
                    for row in conn.execute(
                        "UPDATE sessions SET recovered_by = ?, recovered_at = ? "  # noqa: S608 - fixed text
                        f"WHERE id <> ? AND recovered_by IS NULL{lapsed} RETURNING id",
                        params,
                    ).fetchall()
                ]
                owners = [*won]
                if won or exclusive:
                    marks = ", ".join("?" * len(won)) or "NULL"
                    null_too = " OR session IS NULL" if exclusive else ""
                    running = (
                        "SELECT * FROM units WHERE status = ? "  # noqa: S608 - fixed text
                        f"AND (session IN ({marks}){null_too}) ORDER BY created_at, id"
                    )
                    taken.extend(
                        unreadable.decode(row)
                        for row in conn.execute(running, (Status.RUNNING.value, *owners)).fetchall()
                    )
                    if taken:
                        conn.executemany(
                            "UPDATE units SET session = ? WHERE id = ?", [(me, r.id) for r in taken]
                        )
                    if won:
                        handed_back = (
                            "UPDATE units SET session = NULL "  # noqa: S608 - fixed text
                            f"WHERE status = ? AND session IN ({marks})"
                        )
                        conn.execute(handed_back, (Status.PENDING.value, *won))
            return won, list(taken)

        def landed(conn: Connection) -> tuple[list[str], list[UnitRow | Unreadable]] | None:
            """What the lost COMMIT took: the sessions marked by ``me`` at ``now`` (no other
            takeover of ours has that time), and of the units it picked, those that name
            ``me`` now. None when it took no session (nor, exclusive, a unit)."""
            won = [
                str(row[0])
                for row in conn.execute(
                    "SELECT id FROM sessions WHERE recovered_by = ? AND recovered_at = ? "
                    "ORDER BY id",
                    (me, now),
                ).fetchall()
            ]
            moved: list[UnitRow | Unreadable] = []
            if taken:
                marks = ", ".join("?" * len(taken))
                moved = [
                    unreadable.decode(row)
                    for row in conn.execute(
                        f"SELECT * FROM units WHERE id IN ({marks}) AND session = ? "  # noqa: S608
                        "ORDER BY created_at, id",
                        (*[r.id for r in taken], me),
                    ).fetchall()
                ]
            if not won and not moved:
                return None
            return won, moved

        won, rows = settle.settled_write(
            db,
            write,
            landed,
            within=self._ctx.settle_within,
            what=f"the takeover of dead sessions by {me}",
        )
        return won, self._ctx.checked_each(rows)

    def held_by(self, session_id: str) -> list[tuple[str, Status]]:
        """``(id, status)`` of the pending and running units ``session_id`` owns, oldest
        first: what a supervisor compares with its memory (``recovery``'s rescan). IDs
        only: a supervisor running thousands of units reads no spec to find the few it
        lacks."""
        validate(session_id)
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT id, status FROM units WHERE session = ? AND status IN (?, ?) "
                "ORDER BY created_at, id",
                (session_id, Status.PENDING.value, Status.RUNNING.value),
            ).fetchall()
        return [(str(row["id"]), Status(row["status"])) for row in rows]

    def close(self, session_id: str) -> None:
        """Close ``session_id``: its supervisor stopped."""
        self._touch(session_id, "ended_at", durable=True)

    def _touch(self, session_id: str, column: str, *, durable: bool) -> None:
        now = self._ctx.now()
        validate(session_id)
        with self._ctx.db.write(durable=durable) as conn:
            cursor = conn.execute(
                f"UPDATE sessions SET {column} = ? WHERE id = ?",  # noqa: S608 - a fixed column name
                (now, session_id),
            )
            if cursor.rowcount != 1:
                raise LedgerError(
                    f"no session {session_id} in the ledger; open it first (sessions.open)"
                )

    def get(self, session_id: str) -> Session | None:
        validate(session_id)
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else Session(**dict(row))

    def live(self, stale_after: float) -> list[Session]:
        """Sessions not closed whose heartbeat is younger than ``stale_after`` seconds."""
        now = self._ctx.now()
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM sessions WHERE ended_at IS NULL AND heartbeat_at >= ? "
                "ORDER BY started_at, id",
                (now - stale_after,),
            ).fetchall()
        return [Session(**dict(row)) for row in rows]

    def units_of_dead_sessions(
        self, current: str, *, stale_after: float | None = None
    ) -> list[UnitRow]:
        """``running`` units whose session is not ``current`` and not live.

        With ``stale_after=None`` every other session counts as dead: right for a
        caller holding the supervisor lock, since no other supervisor can run.
        Otherwise a session heard from within ``stale_after`` seconds is live.
        """
        now = self._ctx.now()
        validate(current)
        query = "SELECT * FROM units WHERE status = ? AND session IS NOT ?"
        params: tuple[object, ...] = (Status.RUNNING.value, current)
        if stale_after is not None:
            query += (
                " AND (session IS NULL OR session NOT IN (SELECT id FROM sessions "
                "WHERE ended_at IS NULL AND heartbeat_at >= ?))"
            )
            params += (now - stale_after,)
        with self._ctx.db.read() as conn:
            rows = conn.execute(query + " ORDER BY created_at, id", params).fetchall()
        return [self._ctx.checked(UnitRow.from_sql(row)) for row in rows]
