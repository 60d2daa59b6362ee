"""PostgreSQL rows read as SQLite's do: by position, or by column name in any case."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from workunits._ledger.postgres.db import PgRow, _PgColumns

COLUMNS = ["id", "Status", "id"]  # a name twice: the first one wins in both
VALUES = ("a1", "running", "shadowed")


def sqlite_row() -> Any:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT 'a1' AS id, 'running' AS Status, 'shadowed' AS id").fetchone()
    conn.close()
    return row


def test_a_pg_row_answers_every_lookup_as_an_sqlite_row_does() -> None:
    ours, theirs = PgRow(VALUES, _PgColumns(COLUMNS)), sqlite_row()
    for key in ("id", "ID", "Id", "status", "STATUS", "Status", 0, 1, 2, -1):
        assert ours[key] == theirs[key], key
    assert ours.keys() == theirs.keys() == COLUMNS
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


def test_an_unknown_column_is_the_same_error_as_sqlite_s() -> None:
    with pytest.raises(IndexError):
        sqlite_row()["nope"]
    with pytest.raises(IndexError, match="no column named 'nope'"):
        PgRow(VALUES, _PgColumns(COLUMNS))["nope"]
