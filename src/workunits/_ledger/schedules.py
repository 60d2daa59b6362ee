"""Schedules: cron entries kept in the ledger, and the record of each firing.

A schedule row holds what each firing starts (letter, signed spec, options)
and ``next_at``, the next firing due. ``fire`` moves ``next_at`` on and records
the firing in one transaction, so a firing is recorded once: as ``fired`` with
its unit, or as ``missed`` (no supervisor ran at its time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from workunits._core.schedule import ScheduleFiring, ScheduleInfo
from workunits._ledger import values
from workunits._ledger.context import LedgerContext
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

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

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


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _mac_id(name: str) -> str:
    # What a schedule's spec is signed as: no unit ID has a colon, so no unit's
    # spec can be swapped in for it.
    return f"schedule:{name}"
