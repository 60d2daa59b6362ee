"""Requests: how processes other than the supervisor ask it for something.

A CLI, a UI or a reconnecting client never changes a unit itself; it appends
a request (``submit``, ``cancel``, ``kill``, ``retain``, ``release``, ``input``) and the
supervisor applies it on its next tick, or when one next starts. Taking
requests marks them in the same transaction that reads them, so two takers
never get the same request. A supervisor that dies between taking and
finishing a request leaves it taken; the next one calls ``Requests.reopen`` to
take such requests again (at least once, so requests are made idempotent by
the supervisor: cancel/kill of an ended unit is a no-op).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from workunits._core import ids
from workunits._core.errors import LedgerCorrupt, LedgerError, SpecError
from workunits._ledger.context import LedgerContext
from workunits._ledger.sessions import DEFAULT_LEASE
from workunits._ledger.sessions import validate as validate_session
from workunits._util import strictjson

VERBS: Final = ("submit", "cancel", "kill", "retain", "release", "input")


@dataclass(frozen=True, slots=True)
class LedgerRequest:
    seq: int
    verb: str
    target: str
    args: dict[str, Any]
    created_at: float
    taken_at: float | None
    taken_by: str | None
    done_at: float | None
    result: Any


# With several supervisors on one ledger, a request goes to the supervisor whose
# session owns its unit: only that one holds the unit's process. A request whose
# unit no live session owns (unowned, ended, unknown, or its owner's lease has
# lapsed) is taken by whoever asks first.
_ROUTED = (
    "SELECT r.* FROM requests r LEFT JOIN units u ON u.id = r.target "
    "LEFT JOIN sessions s ON s.id = u.session "
    "WHERE r.taken_at IS NULL AND (u.id IS NULL OR u.session IS NULL OR u.session = ? "
    "OR u.status NOT IN ('pending', 'running') OR s.id IS NULL OR s.ended_at IS NOT NULL "
    "OR s.recovered_by IS NOT NULL OR s.heartbeat_at < ? - coalesce(s.lease, ?)) "
    "ORDER BY r.seq LIMIT ?"
)
END_VERBS = ("cancel", "kill")


class Requests:
    """The requests of one Ledger: other processes' commands to its supervisor.

    Every method runs in the calling thread.
    """

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def add(self, verb: str, target: str, args: dict[str, Any] | None = None) -> int:
        """Append a request; return its sequence number. Fully synced: a cancel must not be
        lost."""
        now = self._ctx.now()
        if verb not in VERBS:
            raise SpecError(f"{verb!r} is not a request verb; one of {', '.join(VERBS)}")
        ids.validate(target)
        data = strictjson.dumps({} if args is None else args, f"{verb} request for {target}")
        with self._ctx.db.write(durable=True, wake=f"unit:{target}") as conn:
            row = conn.execute(
                "INSERT INTO requests (verb, target, args, created_at) VALUES (?, ?, ?, ?) "
                "RETURNING seq",
                (verb, target, data, now),
            ).fetchone()
            return int(row[0])

    def take(
        self, limit: int, *, session: str | None = None, routed: bool = False
    ) -> list[LedgerRequest]:
        """Take up to ``limit`` open requests, oldest first; each is taken by one caller only.

        ``routed`` (several supervisors share the ledger): only requests this
        ``session`` may apply, see ``_ROUTED``; a cancel or kill of a pending unit
        nobody claimed claims it for ``session`` in the same transaction, so no
        other supervisor starts what this one is about to end. A poll that found
        nothing skips its read while the ledger has not changed (``polls``).
        """
        return self._ctx.polls.poll(
            ("requests", limit, session, routed),
            lambda: self._take(limit, session, self._ctx.now(), routed=routed),
        )

    def _take(
        self, limit: int, session: str | None, now: float, *, routed: bool
    ) -> list[LedgerRequest]:
        db = self._ctx.db
        # A supervisor asks on every tick and there is usually nothing: look before
        # paying for a write transaction (its lock and commit) to find that out.
        with db.read() as conn:
            if (
                conn.execute("SELECT 1 FROM requests WHERE taken_at IS NULL LIMIT 1").fetchone()
                is None
            ):
                return []
        with db.write(durable=False) as conn:
            if routed and session is not None:
                rows = conn.execute(_ROUTED, (session, now, DEFAULT_LEASE, limit)).fetchall()
                conn.executemany(
                    "UPDATE units SET session = ? WHERE id = ? AND session IS NULL AND status = ?",
                    [
                        (session, row["target"], "pending")
                        for row in rows
                        if row["verb"] in END_VERBS
                    ],
                )
            else:
                rows = conn.execute(
                    "SELECT * FROM requests WHERE taken_at IS NULL ORDER BY seq LIMIT ?", (limit,)
                ).fetchall()
            conn.executemany(
                "UPDATE requests SET taken_at = ?, taken_by = ? WHERE seq = ?",
                [(now, session, row["seq"]) for row in rows],
            )
            # A row written outside workunits that does not decode is answered with
            # its error and finished here: raising would refuse the whole batch, at
            # every tick, and no good request behind it would ever be applied.
            taken: list[LedgerRequest] = []
            refused: list[tuple[float, bytes, int]] = []
            for row in rows:
                try:
                    taken.append(_decode(row, taken_at=now, taken_by=session))
                except LedgerCorrupt as exc:
                    answer = strictjson.dumps(
                        {"error": str(exc)}, f"result of request {row['seq']}"
                    )
                    refused.append((now, answer, row["seq"]))
            conn.executemany("UPDATE requests SET done_at = ?, result = ? WHERE seq = ?", refused)
        return taken

    def finish(self, seq: int, result: Any = None) -> None:
        """Record a taken request's outcome (exact JSON), for the client that made it."""
        now = self._ctx.now()
        data = strictjson.dumps(result, f"result of request {seq}")
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.execute(
                "UPDATE requests SET done_at = ?, result = ? WHERE seq = ? "
                "AND taken_at IS NOT NULL",
                (now, data, seq),
            )
            if cursor.rowcount != 1:
                raise LedgerError(f"no taken request {seq} in the ledger")

    def get(self, seq: int) -> LedgerRequest | None:
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT * FROM requests WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else _decode(row)

    def reopen(self, current_session: str) -> int:
        """Make requests taken but never finished by other sessions open again."""
        validate_session(current_session)
        with self._ctx.db.write(durable=False) as conn:
            cursor = conn.execute(
                "UPDATE requests SET taken_at = NULL, taken_by = NULL "
                "WHERE taken_at IS NOT NULL AND done_at IS NULL AND taken_by IS NOT ?",
                (current_session,),
            )
            return cursor.rowcount


def _decode(row: Any, **override: Any) -> LedgerRequest:
    seq = row["seq"]
    where = f"request {seq}"
    args = strictjson.loads(row["args"], where, "requests.args")
    if not isinstance(args, dict):
        raise LedgerCorrupt(f"{where}: column requests.args is not a JSON object")
    result = row["result"]
    fields: dict[str, Any] = {
        "seq": seq,
        "verb": row["verb"],
        "target": row["target"],
        "args": args,
        "created_at": row["created_at"],
        "taken_at": row["taken_at"],
        "taken_by": row["taken_by"],
        "done_at": row["done_at"],
        "result": None if result is None else strictjson.loads(result, where, "requests.result"),
    }
    fields.update(override)
    return LedgerRequest(**fields)
