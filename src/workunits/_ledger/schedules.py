"""Schedules: cron entries kept in the ledger, and the record of each firing.

A schedule row holds what each firing starts (letter, signed spec, options)
and ``next_at``, the next firing due. A due time is taken by a compare-and-set
on ``next_at`` (of several supervisors on one ledger, exactly one takes it),
and in the same transaction its unit is submitted and the firing recorded
(``fire``), or it is recorded as ``missed`` (``miss``: no supervisor ran at its
time). One transaction: no crash at any instant leaves a due time taken but
not recorded, or a unit started with no record of its firing. A COMMIT whose
answer was lost is read back by the firing's record (``settle``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from workunits._core.errors import CommitUnknown, IdempotencyConflict
from workunits._core.schedule import ScheduleFiring, ScheduleInfo
from workunits._ledger import settle, submits, values
from workunits._ledger.backend import Connection
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import NewUnit, UnitRow
from workunits._ledger.units import Units
from workunits._ledger.values import Stored


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    cron: str
    tz: str
    catch_up: str
    letter: str
    spec: Stored
    options: dict[str, Any]
    next_at: float
    created_at: float


class Schedules:
    """The schedules of one Ledger, and the record of their firings.

    Every method runs in the calling thread.
    """

    def __init__(self, ctx: LedgerContext, units: Units) -> None:
        self._ctx = ctx
        self._units = units

    def put(self, row: ScheduleRow) -> None:
        """Add the schedule, or replace the one of that name (its firings stay)."""
        with self._ctx.db.write(durable=True) as conn:
            conn.execute("DELETE FROM schedules WHERE name = ?", (row.name,))
            conn.execute(
                "INSERT INTO schedules (name, cron, tz, catch_up, letter, spec, spec_format, "
                "spec_mac, spec_versions, options, next_at, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.name,
                    row.cron,
                    row.tz,
                    row.catch_up,
                    row.letter,
                    row.spec.data,
                    row.spec.format,
                    row.spec.mac,
                    row.spec.versions,
                    orjson.dumps(row.options),
                    row.next_at,
                    row.created_at,
                ),
            )

    def remove(self, name: str) -> bool:
        """Delete the schedule and its firings' record; False when there was none."""
        with self._ctx.db.write(durable=True) as conn:
            gone = conn.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount
            conn.execute("DELETE FROM schedule_firings WHERE schedule = ?", (name,))
        return bool(gone)

    def all_rows(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        with self._ctx.db.read() as conn:
            rows = conn.execute("SELECT * FROM schedules ORDER BY name").fetchall()
        return [
            ScheduleRow(
                name=r["name"],
                cron=r["cron"],
                tz=r["tz"],
                catch_up=r["catch_up"],
                letter=r["letter"],
                spec=Stored(
                    r["spec_format"], bytes(r["spec"]), _bytes(r["spec_mac"]), r["spec_versions"]
                ),
                options=orjson.loads(bytes(r["options"])),
                next_at=float(r["next_at"]),
                created_at=float(r["created_at"]),
            )
            for r in rows
        ]

    def listing(self) -> list[ScheduleInfo]:
        """Each schedule with its next due time and latest firing, by name."""
        out = []
        for row in self.all_rows():
            last = self.firings(row.name, 1)
            out.append(
                ScheduleInfo(
                    row.name, row.cron, row.tz, row.catch_up, row.next_at, last[0] if last else None
                )
            )
        return out

    def unit_under(self, key: str) -> str | None:
        """The ID of the unit submitted under idempotency ``key``, if any."""
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT id FROM units WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["id"])

    def record_firing(self, name: str, due_at: float, unit: str | None, next_at: float) -> None:
        """Record one firing (``unit`` None: missed) and move the schedule's ``next_at`` on.

        ``next_at`` only moves forward: a supervisor recording late never moves
        it back below where another one has taken it (``advance``).
        """
        now = self._ctx.now()
        outcome = "missed" if unit is None else "fired"
        with self._ctx.db.write(durable=True) as conn:
            conn.execute(
                "INSERT INTO schedule_firings (schedule, due_at, unit, outcome, recorded_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schedule, due_at) DO NOTHING",
                (name, due_at, unit, outcome, now),
            )
            conn.execute(
                "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at < ?",
                (next_at, name, next_at),
            )

    def fire(
        self, name: str, due_at: float, next_at: float, new: NewUnit
    ) -> tuple[UnitRow, bool] | None:
        """Take the firing of ``name`` due at ``due_at``, submit ``new`` for it and record
        it ``fired``, in one fully synced transaction: the unit's row and whether it was
        created, or None when another supervisor took the firing.

        ``new`` carries the firing's idempotency key: a unit already under it (its
        supervisor died after submitting it, before this schedule's change) is the
        firing's unit, returned with ``created`` False -- also when its arguments
        differ (the schedule was changed since): that due time fired once, with them.
        """
        large = self._ctx.large
        kept, digest = self._units.prepared(new)
        now = self._ctx.now()
        db = self._ctx.db

        def write() -> tuple[UnitRow, bool] | None:
            with db.write(durable=True) as conn:
                if not _take(conn, name, due_at, next_at):
                    return None
                answer = submits.insert(conn, kept, digest)
                if isinstance(answer, IdempotencyConflict):
                    found = conn.execute(
                        "SELECT * FROM units WHERE key = ?", (kept.key,)
                    ).fetchone()
                    answer = UnitRow.from_sql(found), False
                _record(conn, name, due_at, answer[0].id, now)
                return answer

        def landed(conn: Connection) -> tuple[UnitRow, bool] | None:
            """Its record at ``now`` names the unit it submitted (or found by its key)."""
            row = conn.execute(
                "SELECT unit FROM schedule_firings WHERE schedule = ? AND due_at = ? "
                "AND recorded_at = ?",
                (name, due_at, now),
            ).fetchone()
            if row is None or row["unit"] is None:
                return None  # not landed; written again, the compare-and-set decides
            unit = conn.execute("SELECT * FROM units WHERE id = ?", (row["unit"],)).fetchone()
            if unit is None:
                return None
            return UnitRow.from_sql(unit), row["unit"] == kept.id

        try:
            answer = settle.settled_write(
                db,
                write,
                landed,
                within=self._ctx.settle_within,
                what=f"the firing of schedule {name!r} due at {due_at}",
                work_id=kept.id,
            )
        except CommitUnknown:
            raise  # its row may point at the spec's file: kept (``sweep_values`` knows)
        except BaseException:
            large.delete([kept.spec.file])
            raise
        if answer is None or not answer[1]:
            large.delete([kept.spec.file])  # nothing of ours points at it
        if answer is None or answer[1]:
            return answer
        return self._ctx.checked(answer[0]), False

    def miss(self, name: str, due_at: float, next_at: float, unit_key: str) -> bool:
        """Take the firing of ``name`` due at ``due_at`` and record it ``missed``, in one
        transaction; False when another supervisor took it.

        A unit under ``unit_key`` (the firing's key) means a supervisor did fire it
        and died before recording so: it is recorded ``fired`` with that unit.
        """
        now = self._ctx.now()
        db = self._ctx.db

        def write() -> bool:
            with db.write(durable=True) as conn:
                if not _take(conn, name, due_at, next_at):
                    return False
                found = conn.execute("SELECT id FROM units WHERE key = ?", (unit_key,)).fetchone()
                _record(conn, name, due_at, None if found is None else str(found["id"]), now)
                return True

        def landed(conn: Connection) -> bool | None:
            row = conn.execute(
                "SELECT 1 FROM schedule_firings WHERE schedule = ? AND due_at = ? "
                "AND recorded_at = ?",
                (name, due_at, now),
            ).fetchone()
            return True if row is not None else None

        return settle.settled_write(
            db, write, landed, within=self._ctx.settle_within, what=f"the miss of schedule {name!r}"
        )

    def advance(self, name: str, due_at: float, next_at: float) -> bool:
        """Take the firing due at ``due_at``: move ``next_at`` from it to ``next_at``.

        A compare-and-set, so among supervisors sharing the ledger exactly one
        takes each firing (True); the others see False and reread the schedule.
        """
        with self._ctx.db.write(durable=True) as conn:
            cursor = conn.execute(
                "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at = ?",
                (next_at, name, due_at),
            )
            return cursor.rowcount == 1

    def firings(self, name: str | None = None, limit: int = 100) -> list[ScheduleFiring]:
        """The latest firings first (of one schedule, or of all)."""
        where, args = ("WHERE schedule = ?", (name,)) if name is not None else ("", ())
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                f"SELECT * FROM schedule_firings {where} ORDER BY due_at DESC LIMIT ?",  # noqa: S608
                (*args, limit),
            ).fetchall()
        return [
            ScheduleFiring(
                r["schedule"], float(r["due_at"]), r["unit"], r["outcome"], float(r["recorded_at"])
            )
            for r in rows
        ]

    def spec_of(self, row: ScheduleRow) -> object:
        """The spec each firing of ``row`` starts, verified against this state dir's key."""
        return values.decode_spec(row.spec, work_id=_mac_id(row.name), key=self._ctx.signing_key)

    def encode_spec(self, spec: object, name: str) -> Stored:
        """``spec`` signed with this state dir's key, for the schedule ``name``'s row."""
        return values.encode_spec(spec, work_id=_mac_id(name), key=self._ctx.signing_key)


def _take(conn: Connection, name: str, due_at: float, next_at: float) -> bool:
    """The compare-and-set on ``next_at``: True for the one transaction that moved it."""
    cursor = conn.execute(
        "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at = ?",
        (next_at, name, due_at),
    )
    return cursor.rowcount == 1


def _record(conn: Connection, name: str, due_at: float, unit: str | None, now: float) -> None:
    conn.execute(
        "INSERT INTO schedule_firings (schedule, due_at, unit, outcome, recorded_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schedule, due_at) DO NOTHING",
        (name, due_at, unit, "missed" if unit is None else "fired", now),
    )


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _mac_id(name: str) -> str:
    # What a schedule's spec is signed as: no unit ID has a colon, so no unit's
    # spec can be swapped in for it.
    return f"schedule:{name}"
