"""Pages of units, their totals, text search and the counts ``/metrics`` reads.

Every read here costs what its page costs, not what the ledger holds:

- **Keyset pages.** Units are ordered by ``(created_at, id)``, which never
  changes for a unit; a page starts after a ``Mark`` (the last unit of the
  previous page), so it neither repeats nor skips a unit that existed then.
  Each filter has an index that yields that order (schema version 9), so
  SQLite reads the page's rows and no others.
- **Totals** are exact where an index answers them in bounded time (the
  ``unit_counts`` table, kept by triggers, for kind and status; a count of
  at most ``COUNT_CAP`` index entries otherwise) and say they are estimates
  past that: "at least 10,000".
- **Text search** matches each word of the query as a prefix of a word of
  the unit's ID, description or key: FTS5 in SQLite, a ``tsvector`` GIN
  index in PostgreSQL. ``matches`` is the same rule in Python, for records
  that only memory holds as they are now.

``ledger.listing`` (``Listing``) runs in the calling thread, on the ledger's read
snapshot (``Database.read``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from workunits._core import ids as _ids
from workunits._core.errors import UnknownWork
from workunits._core.query import (
    Filter,
    words,
)
from workunits._ledger import unreadable
from workunits._ledger.backend import Connection, Row
from workunits._ledger.context import LedgerContext
from workunits._ledger.rows import EXPIRED, LISTED_COLUMNS, UnitRow
from workunits._ledger.unreadable import Unreadable

COUNT_CAP = 10_000
"""Totals past this many units are estimates: counting more would cost more than a page."""


@dataclass(frozen=True, slots=True, order=True)
class Mark:
    """A place in the order of units: the page after it starts with the next unit."""

    created_at: float
    id: str


@dataclass(frozen=True, slots=True)
class Total:
    """How many units a filter matches: exactly ``count``, or at least that many."""

    count: int
    exact: bool


def _where(f: Filter, dialect: str) -> tuple[list[str], list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if f.status == EXPIRED:
        clauses.append("expired_at IS NOT NULL")
    elif f.status is not None:
        clauses.append("status = ? AND expired_at IS NULL")
        params.append(f.status)
    for column in ("kind", "parent", "key"):
        value = getattr(f, column)
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    for column, op, value in (
        ("created_at", ">=", f.created_after),
        ("created_at", "<", f.created_before),
        ("ended_at", ">=", f.ended_after),
    ):
        if value is not None:
            clauses.append(f"{column} {op} ?")
            params.append(value)
    if f.text is not None:
        if dialect == "postgresql":
            clauses.append(f"to_tsvector('simple', {_PG_TEXT}) @@ to_tsquery('simple', ?)")
            params.append(" & ".join(f"{w}:*" for w in words(f.text)))
        else:
            clauses.append("rowid IN (SELECT rowid FROM units_text WHERE units_text MATCH ?)")
            params.append(" ".join(f'"{w}"*' for w in words(f.text)))
    return clauses, params


# The text PostgreSQL's search index is built over (postgres_schema, version 9):
# punctuation made spaces first, or its parser reads "repo-17" as "repo" and "-17".
_PG_TEXT = (
    "regexp_replace(id || ' ' || description || ' ' || coalesce(key, ''), "
    "'[[:punct:][:space:]]+', ' ', 'g')"
)


def _among(ids: Sequence[str], dialect: str, *, inside: bool) -> tuple[str, list[object]]:
    """A clause keeping only ``ids`` (``inside``) or leaving them out, as one parameter:
    a supervisor passes the IDs its memory answers for, a few thousand at most."""
    checked = [_ids.validate(i) for i in ids]
    if dialect == "postgresql":
        clause = "id = ANY (string_to_array(?, ','))"
        return (clause if inside else f"NOT ({clause})"), [",".join(checked)]
    # IN (a subquery): SQLite looks each one up by the primary key, or, for NOT IN,
    # builds a small index of them once per statement.
    clause = f"id {'' if inside else 'NOT '}IN (SELECT value FROM json_each(?))"  # noqa: S608
    return clause, [orjson.dumps(checked).decode()]


# What a listed page selects: a record's columns (``rows.LISTED_COLUMNS``), not
# the spec or checkpoint, which no record holds.
_LISTED = ", ".join(LISTED_COLUMNS)


class Listing:
    """Pages, totals and counts of one Ledger's units. Every method runs in the calling
    thread."""

    def __init__(self, ctx: LedgerContext) -> None:
        self._ctx = ctx

    def page(
        self,
        f: Filter,
        *,
        limit: int | None,
        after: Mark | None = None,
        newest: bool = False,
        exclude: Sequence[str] = (),
        only: Sequence[str] | None = None,
        on_unreadable: Callable[[Unreadable], None] | None = None,
        listed: bool = True,
    ) -> list[UnitRow]:
        """Units of ``f`` after ``after`` in order (``newest``: its reverse), at most ``limit``.

        ``exclude``: IDs left out; ``only``: the page holds none but these IDs.
        A row that cannot be read (``unreadable``) is left out, and the others
        listed: each left out goes to ``on_unreadable``, by default a warning
        logged once per process naming it and how to repair it.

        ``listed`` rows hold what a record holds (``LISTED_COLUMNS``), not the
        spec, checkpoint or trace context; else every column.
        """
        rows = self._rows(f.checked(), limit, after, newest, exclude, only, listed)
        out: list[UnitRow] = []
        for row in self._ctx.checked_each(unreadable.decode(row, listed=listed) for row in rows):
            if isinstance(row, UnitRow):
                out.append(row)
            elif on_unreadable is not None:
                on_unreadable(row)
            else:
                unreadable.report(row, logging.WARNING, "is left out of the list")
        return out

    def _rows(  # noqa: PLR0917 - page's own arguments
        self,
        f: Filter,
        limit: int | None,
        after: Mark | None,
        newest: bool,
        exclude: Sequence[str],
        only: Sequence[str] | None,
        listed: bool,
    ) -> list[Row]:
        db = self._ctx.db
        clauses, params = _where(f, db.dialect)
        if after is not None:
            # Row values compare as the order does, and use the (…, created_at, id) indexes.
            clauses.append("(created_at, id) < (?, ?)" if newest else "(created_at, id) > (?, ?)")
            params += [after.created_at, after.id]
        for ids, inside in ((exclude, False), (only, True)):
            if ids is None or (not ids and not inside):
                continue
            if not ids:
                return []  # only these, and there are none
            sql, more = _among(ids, db.dialect, inside=inside)
            clauses.append(sql)
            params += more
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "created_at DESC, id DESC" if newest else "created_at, id"
        params.append(-1 if limit is None else limit)
        columns = _LISTED if listed else "*"
        sql = f"SELECT {columns} FROM units {where} ORDER BY {order} LIMIT ?"  # noqa: S608 - fixed clauses
        with db.read() as conn:
            return list(conn.execute(sql, params))

    def mark_of(self, work_id: str) -> Mark:
        """Where ``work_id`` stands in the order of pages; UnknownWork if the ledger has none."""
        _ids.validate(work_id)
        with self._ctx.db.read() as conn:
            row = conn.execute("SELECT created_at FROM units WHERE id = ?", (work_id,)).fetchone()
        if row is None:
            raise UnknownWork(f"the ledger has no unit {work_id}")
        return Mark(float(row["created_at"]), work_id)

    def total(self, f: Filter) -> Total:
        """How many units ``f`` matches: exact from the counts or up to ``COUNT_CAP``, else
        at least ``COUNT_CAP`` (an estimate)."""
        f = f.checked()
        db = self._ctx.db
        with db.read() as conn:
            if f.only_counted:
                return Total(_counted(conn, f), True)
            clauses, params = _where(f, db.dialect)
            where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
            row = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM units {where} LIMIT ?) AS capped",  # noqa: S608
                [*params, COUNT_CAP + 1],
            ).fetchone()
        found = int(row[0])
        return Total(min(found, COUNT_CAP), found <= COUNT_CAP)

    def counts(self) -> dict[tuple[str, str], int]:
        """Units by (kind, shown status: ``expired`` once expired), from ``unit_counts``,
        which the ledger's triggers keep."""
        out: dict[tuple[str, str], int] = {}
        with self._ctx.db.read() as conn:
            for row in conn.execute("SELECT kind, status, expired, n FROM unit_counts WHERE n > 0"):
                shown = EXPIRED if row["expired"] else str(row["status"])
                key = (str(row["kind"]), shown)
                out[key] = out.get(key, 0) + int(row["n"])
        return out

    def waiting_notices(self, limit: int = 500) -> list[dict[str, object]]:
        """Notices not yet acknowledged, oldest first, at most ``limit``: for a view, which
        claims nothing (``outbox`` hands them out)."""
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT id, status, parent, created_at, claimed_by, claim_until, deliveries "
                "FROM notifications WHERE delivered_at IS NULL ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            {
                "id": str(r["id"]),
                "status": str(r["status"]),
                "parent": r["parent"],
                "created_at": float(r["created_at"]),
                "claimed": r["claimed_by"] is not None,
                "claim_until": r["claim_until"],
                "deliveries": int(r["deliveries"] or 0),
            }
            for r in rows
        ]

    def signals_of(self, work_id: str, limit: int = 200) -> list[dict[str, object]]:
        """The signals sent to a unit (taken or not), oldest first, at most ``limit``."""
        _ids.validate(work_id)
        with self._ctx.db.read() as conn:
            rows = conn.execute(
                "SELECT name, created_at, consumed_at FROM signals WHERE unit = ? "
                "ORDER BY seq LIMIT ?",
                (work_id, limit),
            ).fetchall()
        return [
            {"name": str(r["name"]), "at": float(r["created_at"]), "taken_at": r["consumed_at"]}
            for r in rows
        ]


def _counted(conn: Connection, f: Filter) -> int:
    clauses: list[str] = []
    params: list[object] = []
    if f.status == EXPIRED:
        clauses.append("expired = 1")
    elif f.status is not None:
        clauses.append("status = ? AND expired = 0")
        params.append(f.status)
    if f.kind is not None:
        clauses.append("kind = ?")
        params.append(f.kind)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    row = conn.execute(
        f"SELECT coalesce(sum(n), 0) FROM unit_counts {where}",  # noqa: S608 - fixed clauses
        params,
    ).fetchone()
    return int(row[0])
