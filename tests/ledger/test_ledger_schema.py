"""Schema creation, forward migration, and refusal of what this version cannot read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.ledger.support import new_unit
from workunits._ledger import SCHEMA_VERSION, Ledger, LedgerCorrupt, LedgerVersionError
from workunits._ledger.sqlite import schema


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


@pytest.mark.sqlite_only
def test_a_new_ledger_has_every_table_and_the_current_version(ledger: Ledger) -> None:
    conn = _connect(ledger.path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert {"units", "notifications", "requests", "sessions"} <= tables
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
    assert {"units_key", "units_status", "units_parent", "units_expire"} <= indexes
    assert schema.user_version(conn) == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_migrations_run_forward_one_step_at_a_time_and_keep_data(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "ledger.db")
    assert schema.migrate(conn, "test", schema.MIGRATIONS) == 0
    conn.execute(
        "INSERT INTO units (id, kind, status, spec_hash, spec_format, created_at) "
        "VALUES ('a00000000', 'agent', 'pending', 'h', 'json', 1.0)"
    )
    later = (*schema.MIGRATIONS, "ALTER TABLE units ADD COLUMN colour TEXT DEFAULT 'blue'")
    assert schema.migrate(conn, "test", later) == SCHEMA_VERSION
    assert schema.user_version(conn) == SCHEMA_VERSION + 1
    row = conn.execute("SELECT id, colour FROM units").fetchone()
    assert row == ("a00000000", "blue")
    # Already current: nothing runs again.
    assert schema.migrate(conn, "test", later) == SCHEMA_VERSION + 1
    conn.close()


def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "ledger.db")
    schema.migrate(conn, "test")
    broken = (*schema.MIGRATIONS, "ALTER TABLE units ADD COLUMN x TEXT; SELECT * FROM nowhere")
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        schema.migrate(conn, "test", broken)
    assert schema.user_version(conn) == SCHEMA_VERSION
    columns = {r[1] for r in conn.execute("PRAGMA table_info(units)")}
    assert "x" not in columns
    conn.close()


def test_a_ledger_from_a_newer_schema_is_refused_naming_both_versions(
    ledger: Ledger, state_dir: Path
) -> None:
    new_unit(ledger)
    ledger.close()
    conn = _connect(state_dir / "ledger.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.close()
    with pytest.raises(LedgerVersionError) as caught:
        Ledger(state_dir)
    message = str(caught.value)
    assert f"version {SCHEMA_VERSION + 3}" in message
    assert f"up to {SCHEMA_VERSION}" in message
    assert "Upgrade workunits" in message


def test_another_programs_database_is_not_taken_over(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    conn = _connect(state_dir / "ledger.db")
    conn.execute("CREATE TABLE mine (x)")
    conn.close()
    with pytest.raises(LedgerCorrupt, match="not a workunits ledger"):
        Ledger(state_dir)


def test_a_file_that_is_not_sqlite_is_reported_as_corrupt(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "ledger.db").write_bytes(b"definitely not a database" * 100)
    with pytest.raises(LedgerCorrupt, match=r"ledger\.db"):
        Ledger(state_dir)


def test_version_11_takes_input_requests_and_keeps_requests_and_their_sequence(
    tmp_path: Path,
) -> None:
    conn = _connect(tmp_path / "ledger.db")
    schema.migrate(conn, "test", schema.MIGRATIONS[:10])
    add = (
        "INSERT INTO requests (verb, target, args, created_at) "
        "VALUES (?, 'b00000000', x'7b7d', 1.0)"
    )
    for verb in ("kill", "cancel", "kill"):
        conn.execute(add, (verb,))
    conn.execute("DELETE FROM requests WHERE seq = 3")  # the newest gone: its seq stays used
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(add, ("input",))
    assert schema.migrate(conn, "test") == 10
    assert [r[0] for r in conn.execute("SELECT verb FROM requests ORDER BY seq")] == [
        "kill",
        "cancel",
    ]
    seq = conn.execute(add + " RETURNING seq", ("input",)).fetchone()[0]
    assert seq == 4  # never a seq a client may still hold
    plan = " ".join(
        str(r[3])
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM requests WHERE taken_at IS NULL ORDER BY seq"
        )
    )
    assert "requests_open" in plan
    conn.close()
