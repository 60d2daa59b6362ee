"""Signals: outside input a unit waits for (``ctx.wait_for(name)``), kept in the ledger.

Any process sends one by inserting a row (``Signals.send``): no request round
trip, so a signal sent while no supervisor runs waits here. A row is open until
the unit's first checkpoint (or end) after it received it; ``consume`` marks it
then, in the checkpoint's own transaction (``Attempts.save_checkpoint``; an
end marks them all in its own, ``writes``), so a resumed attempt receives
exactly the signals its checkpoint had not covered. Rows keep their ``seq``
order (AUTOINCREMENT, taken under the ledger's write lock): signals of one name
reach the unit in the order they were sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workunits._core import ids
from workunits._core.errors import SpecError, UnknownWork
from workunits._core.status import is_terminal
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._ledger.writes import status_of
from workunits._util import strictjson
from workunits._util.signalname import check_name


@dataclass(frozen=True, slots=True)
class StoredSignal:
    seq: int
    unit: str
    name: str
    value: Any
    created_at: float


# Built-in kinds whose units run no code of the user's that could call ctx.wait_for.
DEAF_KINDS = frozenset({"shell", "monitor"})


class Signals:
    """The signals of one Ledger. Every method runs in the calling thread."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def send(self, unit: str, name: str, value: Any = None) -> int | None:
        """Keep a signal for ``unit``; its seq, or None when the unit has ended (nothing kept).

        UnknownWork when the ledger has no such unit; SpecError for a shell or a
        monitor, which never wait for one. Fully synced: an approval that was
        acknowledged must not be lost.
        """
        now = self._ctx.now()
        ids.validate(unit)
        check_name(name)
        data = strictjson.dumps(value, f"value of signal {name!r} for {unit}")
        with self._ctx.db.write(durable=True, wake=f"unit:{unit}") as conn:
            row = conn.execute("SELECT status, kind FROM units WHERE id = ?", (unit,)).fetchone()
            if row is None:
                raise UnknownWork(f"no work unit {unit!r} in this ledger")
            if is_terminal(status_of(row["status"], unit)):
                return None
            if row["kind"] in DEAF_KINDS:
                raise SpecError(
                    f"{unit} is a {row['kind']} unit, which never waits for a signal: agents, "
                    f"workflows, teammates and dreams do (ctx.wait_for)"
                )
            inserted = conn.execute(
                "INSERT INTO signals (unit, name, value, created_at) VALUES (?, ?, ?, ?) "
                "RETURNING seq",
                (unit, name, data, now),
            ).fetchone()
            return int(inserted[0])

    def open_for(self, unit: str) -> list[StoredSignal]:
        """The signals ``unit`` has not consumed, oldest first."""
        ids.validate(unit)
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM signals WHERE unit = ? AND consumed_at IS NULL ORDER BY seq",
                (unit,),
            ).fetchall()
        return [_decode(row) for row in rows]

    def after(self, seq: int, limit: int = 256) -> list[StoredSignal]:
        """Open signals sent after ``seq`` (to any unit), oldest first: what a tick routes.

        A poll that found nothing skips its read while the ledger has not
        changed (``polls``)."""
        return self._ctx.polls.poll(("signals", seq, limit), lambda: self._after(seq, limit))

    def _after(self, seq: int, limit: int) -> list[StoredSignal]:
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM signals WHERE seq > ? AND consumed_at IS NULL ORDER BY seq LIMIT ?",
                (seq, limit),
            ).fetchall()
        return [_decode(row) for row in rows]

    def last_seq(self) -> int:
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT coalesce(max(seq), 0) FROM signals").fetchone()
        return int(row[0])


def consume(conn: Connection, unit: str, seqs: Sequence[int], now: float) -> None:
    """Mark ``seqs`` of ``unit`` consumed, inside the caller's write transaction."""
    conn.executemany(
        "UPDATE signals SET consumed_at = ? WHERE seq = ? AND unit = ? AND consumed_at IS NULL",
        [(now, int(seq), unit) for seq in seqs],
    )


def _decode(row: Any) -> StoredSignal:
    where = f"signal {row['seq']}"
    return StoredSignal(
        seq=int(row["seq"]),
        unit=row["unit"],
        name=row["name"],
        value=strictjson.loads(row["value"], where, "signals.value"),
        created_at=float(row["created_at"]),
    )
