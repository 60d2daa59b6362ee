"""The PostgreSQL backend's own parts: its schema versions, its SQL rewriting, its refusals.

Everything the two backends share is tested on both by the other ledger tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

from tests.ledger.support import new_unit  # noqa: E402 - after the skip above
from workunits._core.errors import LedgerError, SpecError  # noqa: E402
from workunits._ledger import SCHEMA_VERSION, Ledger, LedgerCorrupt, LedgerVersionError  # noqa: E402
from workunits._ledger.postgres import schema as pg_schema  # noqa: E402
from workunits._ledger.postgres.db import WRITE_LOCK, redacted  # noqa: E402
from workunits._ledger.postgres.sql import translate  # noqa: E402
from workunits._ledger.sqlite import schema  # noqa: E402


def test_every_sqlite_migration_has_its_postgres_counterpart() -> None:
    assert len(pg_schema.MIGRATIONS) == len(schema.MIGRATIONS) == SCHEMA_VERSION


def test_a_new_postgres_ledger_has_every_table_and_the_current_version(
    postgres_url: str, state_dir: Path
) -> None:
    Ledger(state_dir, ledger=postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables")}
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert pg_schema.version(conn) == SCHEMA_VERSION
    assert {"units", "notifications", "requests", "sessions", "retains"} <= tables
    assert {"units_key", "units_expire", "notifications_claimed", "retains_unit"} <= indexes
    assert not (state_dir / "ledger.db").exists()  # the state dir keeps no SQLite ledger


def test_migrations_run_forward_one_step_at_a_time_and_keep_data(
    postgres_url: str, state_dir: Path
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert pg_schema.migrate(conn, "db", WRITE_LOCK, pg_schema.MIGRATIONS[:1]) == 0
        assert pg_schema.version(conn) == 1
    with Ledger(state_dir, ledger=postgres_url) as ledger:  # migrates 1 -> current
        unit = new_unit(ledger)
        ledger.retains.add(unit.id, 30)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert pg_schema.version(conn) == SCHEMA_VERSION
        assert pg_schema.migrate(conn, "db", WRITE_LOCK) == SCHEMA_VERSION  # nothing to do


def test_a_failing_migration_leaves_the_previous_version(postgres_url: str) -> None:
    broken = (*pg_schema.MIGRATIONS[:1], "CREATE TABLE t (a int); SELECT * FROM nowhere")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            pg_schema.migrate(conn, "db", WRITE_LOCK, broken)
        assert pg_schema.version(conn) == 1
        row = conn.execute("SELECT to_regclass('t') IS NULL").fetchone()
        assert row is not None
        assert row[0]  # the half-done step left nothing


def test_a_ledger_from_a_newer_schema_is_refused_naming_both_versions(
    postgres_url: str, state_dir: Path
) -> None:
    Ledger(state_dir, ledger=postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO workunits_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(LedgerVersionError, match=f"version {SCHEMA_VERSION + 1}.*up to"):
        Ledger(state_dir, ledger=postgres_url)


def test_another_programs_tables_are_not_taken_over(postgres_url: str, state_dir: Path) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE units (id int)")
    with pytest.raises(LedgerCorrupt, match="not a workunits ledger"):
        Ledger(state_dir, ledger=postgres_url)


def test_an_unreachable_server_is_a_clear_error(state_dir: Path, tmp_path: Path) -> None:
    url = f"postgresql://nobody:secret@/db?host={tmp_path}"
    with pytest.raises(LedgerError, match="cannot connect to the ledger") as caught:
        Ledger(state_dir, ledger=url, busy_timeout=1.0)
    assert "secret" not in str(caught.value)  # the password is never shown


def test_a_ledger_that_is_not_a_postgres_url_is_refused(state_dir: Path) -> None:
    with pytest.raises(SpecError, match="postgresql:// URL"):
        Ledger(state_dir, ledger="mysql://localhost/db")


def test_redacted_hides_only_the_password() -> None:
    assert redacted("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redacted("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        (
            "SELECT 1 FROM t WHERE a = ? AND b IS ?",
            "SELECT 1 FROM t WHERE a = %s AND b IS NOT DISTINCT FROM %s",
        ),
        ("UPDATE t SET a = 1 WHERE b IS NOT ?", "UPDATE t SET a = 1 WHERE b IS DISTINCT FROM %s"),
        (
            "SELECT * FROM t ORDER BY seq LIMIT ?",
            "SELECT * FROM t ORDER BY seq LIMIT NULLIF(%s, -1)",
        ),
        ("SELECT a FROM t INDEXED BY t_a WHERE a <= ?", "SELECT a FROM t WHERE a <= %s"),
        ("SELECT '?%' || ? FROM t", "SELECT '?%' || %s FROM t"),
        ("SELECT a % 2 FROM t", "SELECT a %% 2 FROM t"),
    ],
)
def test_sqlite_spellings_become_their_postgres_counterparts(sqlite: str, postgres: str) -> None:
    assert translate(sqlite) == postgres


@pytest.mark.parametrize("sql", ["PRAGMA user_version", "INSERT OR REPLACE INTO t VALUES (?)"])
def test_sqlite_only_statements_are_refused_not_run_with_another_meaning(sql: str) -> None:
    with pytest.raises(LedgerError, match="no PostgreSQL counterpart"):
        translate(sql)
