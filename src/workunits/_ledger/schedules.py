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
from workunits._ledger.backend import Database
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


def put(db: Database, row: ScheduleRow) -> None:
    """Add the schedule, or replace the one of that name (its firings stay)."""
    with db.write(durable=True) as conn:
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


def remove(db: Database, name: str) -> bool:
    """Delete the schedule and its firings' record; False when there was none."""
    with db.write(durable=True) as conn:
        gone = conn.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount
        conn.execute("DELETE FROM schedule_firings WHERE schedule = ?", (name,))
    return bool(gone)


def all_rows(db: Database) -> list[ScheduleRow]:
    with db.read() as conn:
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


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def unit_under(db: Database, key: str) -> str | None:
    """The ID of the unit submitted under idempotency ``key``, if any."""
    with db.read() as conn:
        row = conn.execute("SELECT id FROM units WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row["id"])


def record(
    db: Database,
    name: str,
    *,
    due_at: float,
    unit: str | None,
    next_at: float,
    now: float,
) -> None:
    """Record one firing (``unit`` None: missed) and move the schedule's ``next_at`` on.

    ``next_at`` only moves forward: a supervisor recording late never moves
    it back below where another one has taken it (``advance``).
    """
    outcome = "missed" if unit is None else "fired"
    with db.write(durable=True) as conn:
        conn.execute(
            "INSERT INTO schedule_firings (schedule, due_at, unit, outcome, recorded_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schedule, due_at) DO NOTHING",
            (name, due_at, unit, outcome, now),
        )
        conn.execute(
            "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at < ?",
            (next_at, name, next_at),
        )


def advance(db: Database, name: str, due_at: float, next_at: float) -> bool:
    """Take the firing due at ``due_at``: move ``next_at`` from it to ``next_at``.

    A compare-and-set, so among supervisors sharing the ledger exactly one
    takes each firing (True); the others see False and reread the schedule.
    """
    with db.write(durable=True) as conn:
        cursor = conn.execute(
            "UPDATE schedules SET next_at = ? WHERE name = ? AND next_at = ?",
            (next_at, name, due_at),
        )
        return cursor.rowcount == 1


def firings(db: Database, name: str | None = None, limit: int = 100) -> list[ScheduleFiring]:
    """The latest firings first (of one schedule, or of all)."""
    where, args = ("WHERE schedule = ?", (name,)) if name is not None else ("", ())
    with db.read() as conn:
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


def listing(db: Database) -> list[ScheduleInfo]:
    out = []
    for row in all_rows(db):
        last = firings(db, row.name, 1)
        out.append(
            ScheduleInfo(
                row.name, row.cron, row.tz, row.catch_up, row.next_at, last[0] if last else None
            )
        )
    return out
