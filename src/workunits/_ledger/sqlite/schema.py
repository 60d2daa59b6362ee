"""The ledger's tables and their forward migrations, keyed by ``PRAGMA user_version``.

Each migration takes the database from version ``n - 1`` to ``n`` and runs in
its own ``BEGIN IMMEDIATE`` transaction together with the new ``user_version``,
so a crash mid-migration leaves the previous version intact, and two processes
opening a fresh ledger at once migrate it exactly once (the second re-reads the
version under the write lock and finds nothing to do).

Migrations are append-only: a released one is never edited, a change is a new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from workunits._core.errors import LedgerCorrupt, LedgerVersionError

# "wu" "l1" in ASCII: marks the file as a workunits ledger, so a stray SQLite
# file given as a state dir is refused instead of having tables added to it.
APPLICATION_ID = 0x77756C31

_V1 = """
CREATE TABLE units (
    id               TEXT PRIMARY KEY NOT NULL,
    kind             TEXT NOT NULL,
    status           TEXT NOT NULL,
    parent           TEXT,
    description      TEXT NOT NULL DEFAULT '',
    key              TEXT,                      -- idempotency key, unique when set
    spec_hash        TEXT NOT NULL,
    spec             BLOB,                      -- NULL once expired
    spec_format      TEXT NOT NULL CHECK (spec_format IN ('ref', 'pickle', 'json')),
    spec_mac         BLOB,
    spec_versions    TEXT,
    attempt          INTEGER NOT NULL DEFAULT 1,
    max_attempts     INTEGER NOT NULL DEFAULT 1,
    resumable        INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    started_at       REAL,
    ended_at         REAL,
    exit_code        INTEGER,
    signal           INTEGER,
    error            TEXT,
    reason           TEXT,
    output_path      TEXT,
    output_bytes     INTEGER NOT NULL DEFAULT 0,
    output_tail      BLOB,
    progress         REAL,
    progress_message TEXT,
    checkpoint       BLOB,                      -- orjson
    result           BLOB,
    result_format    TEXT CHECK (result_format IN ('json', 'pickle')),
    result_mac       BLOB,
    result_versions  TEXT,
    cause            BLOB,                      -- a failed unit's pickled exception
    cause_format     TEXT CHECK (cause_format IN ('pickle')),
    cause_mac        BLOB,
    cause_versions   TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    retain           INTEGER NOT NULL DEFAULT 0,
    session          TEXT,
    pid              INTEGER,
    expire_at        REAL,
    -- The terminal status stays in `status` (terminal is permanent); expiry is
    -- this timestamp, and readers show the status as `expired` once it is set.
    expired_at       REAL
);
-- Every index page a submit touches is one more page in the WAL it fsyncs,
-- so indexes leave out the rows their queries never look for: unkeyed and
-- root units, and units that have not ended. (`key = ?`, `parent = ?` and
-- `expire_at <= ?` imply the IS NOT NULL conditions, so SQLite uses them.)
CREATE UNIQUE INDEX units_key ON units (key) WHERE key IS NOT NULL;
CREATE INDEX units_status ON units (status);
CREATE INDEX units_parent ON units (parent) WHERE parent IS NOT NULL;
CREATE INDEX units_expire ON units (expire_at) WHERE expire_at IS NOT NULL AND expired_at IS NULL;

-- The outbox: one row per terminal transition, written in the same
-- transaction as the transition itself (invariant 11).
CREATE TABLE notifications (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL,
    status       TEXT NOT NULL,
    parent       TEXT,
    payload      BLOB NOT NULL,                 -- orjson
    created_at   REAL NOT NULL,
    delivered_at REAL,
    UNIQUE (id, status)
);
CREATE INDEX notifications_undelivered ON notifications (parent) WHERE delivered_at IS NULL;

-- Commands from other processes; the supervisor applies them on its tick.
CREATE TABLE requests (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, so a client's seq stays its own
    verb       TEXT NOT NULL CHECK (verb IN ('submit', 'cancel', 'kill', 'retain', 'release')),
    target     TEXT NOT NULL,
    args       BLOB NOT NULL,                     -- orjson
    created_at REAL NOT NULL,
    taken_at   REAL,
    taken_by   TEXT,
    done_at    REAL,
    result     BLOB                               -- orjson
);
CREATE INDEX requests_open ON requests (seq) WHERE taken_at IS NULL;

CREATE TABLE sessions (
    id           TEXT PRIMARY KEY NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    ended_at     REAL
);
"""

# Notices are claimed, then acknowledged (invariant 11): a claim names its
# consumer (a process, by `_util.procid`, plus a token per claim) and, for a remote
# consumer, a lease; `delivered_at` now means acknowledged. Retains become
# leases held by a process, so a viewer that dies stops holding its units.
# The old `retain` flags had no holder to renew them: they are dropped. An
# evicted record keeps its reader's offset (`output_offset`).
_V2 = """
ALTER TABLE notifications ADD COLUMN claimed_by TEXT;
ALTER TABLE notifications ADD COLUMN claim_until REAL;
ALTER TABLE notifications ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0;
CREATE INDEX notifications_claimed ON notifications (parent)
    WHERE claimed_by IS NOT NULL AND delivered_at IS NULL;
CREATE TABLE retains (
    lease_id   TEXT PRIMARY KEY NOT NULL,
    unit       TEXT NOT NULL,
    owner      TEXT NOT NULL,                     -- a process, by workunits._util.procid
    expires_at REAL NOT NULL
);
CREATE INDEX retains_unit ON retains (unit);
UPDATE units SET retain = 0 WHERE retain != 0;
ALTER TABLE units ADD COLUMN output_offset INTEGER NOT NULL DEFAULT 0;
"""

# Values larger than valuestore.LARGE_VALUE live in files beside the ledger;
# the row names its file (`<id>.<purpose>.<hmac>`) and keeps an empty blob.
# The switch to incremental vacuum that goes with it (space freed by gc goes
# back to the file system) needs a VACUUM, which cannot run in a
# transaction: `switch_to_incremental_vacuum` does it after the migrations.
_V3 = """
ALTER TABLE units ADD COLUMN spec_file TEXT;
ALTER TABLE units ADD COLUMN result_file TEXT;
ALTER TABLE units ADD COLUMN checkpoint_file TEXT;
"""

# Durable work beyond one attempt. A unit's retry policy (JSON, see
# workunits._core.retry) and, while it waits between attempts (still `running`),
# when the next one is due; the attempts that failed before (JSON list).
# `retry_of` links a unit started by retry(id) to the failed one (whose key it
# took). Progress is stamped (`progress_at`) and may carry JSON evidence;
# `stall_after` is how long a unit may stay quiet before its parent hears.
_V4 = """
ALTER TABLE units ADD COLUMN retry_policy TEXT;
ALTER TABLE units ADD COLUMN retry_at REAL;
ALTER TABLE units ADD COLUMN attempts_log TEXT;
ALTER TABLE units ADD COLUMN retry_of TEXT;
ALTER TABLE units ADD COLUMN stall_after REAL;
ALTER TABLE units ADD COLUMN progress_at REAL;
ALTER TABLE units ADD COLUMN progress_evidence TEXT;
CREATE INDEX units_retry_of ON units (retry_of) WHERE retry_of IS NOT NULL;
"""

# Outside input and time. A unit waits in `ctx.wait_for(name)` for a signal:
# `signals` keeps each one sent (by any process, written directly: no request
# round trip) until the unit's checkpoint after it received it marks it
# consumed, so a resumed attempt receives those it had not consumed.
# `not_before`: a unit stays pending until then. `schedules` are cron entries;
# each firing is a unit keyed by schedule and time (`schedule_firings` records
# it, or records it missed), so a restart never fires one twice.
_V5 = """
CREATE TABLE signals (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: delivery order
    unit        TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       BLOB NOT NULL,                     -- orjson
    created_at  REAL NOT NULL,
    consumed_at REAL
);
CREATE INDEX signals_open ON signals (unit, seq) WHERE consumed_at IS NULL;
ALTER TABLE units ADD COLUMN not_before REAL;
CREATE TABLE schedules (
    name        TEXT PRIMARY KEY NOT NULL,
    cron        TEXT NOT NULL,
    tz          TEXT NOT NULL,
    catch_up    TEXT NOT NULL CHECK (catch_up IN ('skip', 'run-once')),
    letter      TEXT NOT NULL,                     -- the kind of unit each firing starts
    spec        BLOB NOT NULL,                     -- the unit's durable spec, as units.spec
    spec_format TEXT NOT NULL CHECK (spec_format IN ('ref', 'pickle', 'json')),
    spec_mac    BLOB,
    spec_versions TEXT,
    options     BLOB NOT NULL,                     -- orjson: description, timeout, ...
    next_at     REAL NOT NULL,                     -- the next firing due
    created_at  REAL NOT NULL
);
CREATE TABLE schedule_firings (
    schedule    TEXT NOT NULL,
    due_at      REAL NOT NULL,
    unit        TEXT,                              -- NULL for a missed firing
    outcome     TEXT NOT NULL CHECK (outcome IN ('fired', 'missed')),
    recorded_at REAL NOT NULL,
    PRIMARY KEY (schedule, due_at)
);
"""

# Sessions as leases (several supervisors on one PostgreSQL ledger): each
# session says how long its lease lasts (NULL: written before leases, and
# taken by the default), and the session that took it over when it lapsed, so
# exactly one live supervisor recovers a dead one's units and every later
# write of the dead one is refused (fencing by session, invariant 13).
_V6 = """
ALTER TABLE sessions ADD COLUMN lease REAL;
ALTER TABLE sessions ADD COLUMN recovered_by TEXT;
ALTER TABLE sessions ADD COLUMN recovered_at REAL;
CREATE INDEX units_session_status ON units (session, status);
"""

# The URL a session's HTTP API is reached at (`serve --advertise`), for reads of
# live output from other hosts. (PostgreSQL's migration 7 also adds the table of
# large values every host reads; SQLite's stay in the state dir's files.)
_V7 = """
ALTER TABLE sessions ADD COLUMN url TEXT;
"""

# Checkpoints are signed as specs and results are (values.signed_json): a
# checkpoint changed outside workunits is refused, not resumed from.
_V8 = """
ALTER TABLE units ADD COLUMN checkpoint_mac BLOB;
"""

# Listing that costs what its page costs (issue 39; ``listing``): an index per
# filter in the order of a page, (created_at, id); the live units' statuses
# apart from the expired ones, so a page of "completed" does not step over a
# year of expired rows; units by kind and status counted by triggers, so
# /metrics and totals read a few rows; and FTS5 over ID, description and key.
_V9 = """
ALTER TABLE units ADD COLUMN trace_context TEXT;  -- its span's W3C traceparent (tracing)
CREATE INDEX units_created ON units (created_at, id);
CREATE INDEX units_kind_created ON units (kind, created_at, id);
CREATE INDEX units_live_status ON units (status, created_at, id) WHERE expired_at IS NULL;
CREATE INDEX units_expired_created ON units (created_at, id) WHERE expired_at IS NOT NULL;
DROP INDEX units_parent;
CREATE INDEX units_parent ON units (parent, created_at, id) WHERE parent IS NOT NULL;
CREATE TABLE unit_counts (
    kind    TEXT NOT NULL,
    status  TEXT NOT NULL,
    expired INTEGER NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (kind, status, expired)
) WITHOUT ROWID;
INSERT INTO unit_counts (kind, status, expired, n)
    SELECT kind, status, expired_at IS NOT NULL, count(*) FROM units GROUP BY 1, 2, 3;
CREATE TRIGGER units_counted AFTER INSERT ON units BEGIN
    INSERT INTO unit_counts (kind, status, expired, n)
        VALUES (NEW.kind, NEW.status, NEW.expired_at IS NOT NULL, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER units_recounted AFTER UPDATE OF status, expired_at ON units
    WHEN OLD.status IS NOT NEW.status OR (OLD.expired_at IS NULL) != (NEW.expired_at IS NULL)
BEGIN
    UPDATE unit_counts SET n = n - 1
        WHERE kind = OLD.kind AND status = OLD.status AND expired = (OLD.expired_at IS NOT NULL);
    INSERT INTO unit_counts (kind, status, expired, n)
        VALUES (NEW.kind, NEW.status, NEW.expired_at IS NOT NULL, 1)
        ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER units_uncounted AFTER DELETE ON units BEGIN
    UPDATE unit_counts SET n = n - 1
        WHERE kind = OLD.kind AND status = OLD.status AND expired = (OLD.expired_at IS NOT NULL);
END;
CREATE VIRTUAL TABLE units_text USING fts5 (
    id, description, key, content = 'units', tokenize = "unicode61 remove_diacritics 0"
);
INSERT INTO units_text (rowid, id, description, key) SELECT rowid, id, description, key FROM units;
CREATE TRIGGER units_text_added AFTER INSERT ON units BEGIN
    INSERT INTO units_text (rowid, id, description, key)
        VALUES (NEW.rowid, NEW.id, NEW.description, NEW.key);
END;
CREATE TRIGGER units_text_dropped AFTER DELETE ON units BEGIN
    INSERT INTO units_text (units_text, rowid, id, description, key)
        VALUES ('delete', OLD.rowid, OLD.id, OLD.description, OLD.key);
END;
CREATE TRIGGER units_text_changed AFTER UPDATE OF description, key ON units BEGIN
    INSERT INTO units_text (units_text, rowid, id, description, key)
        VALUES ('delete', OLD.rowid, OLD.id, OLD.description, OLD.key);
    INSERT INTO units_text (rowid, id, description, key)
        VALUES (NEW.rowid, NEW.id, NEW.description, NEW.key);
END;
"""

# Each unit's sandbox policy (JSON: the policy and what of it was not enforced), so a
# resumed, retried or re-run unit runs under the same one (DESIGN invariant 15).
_V10 = """
ALTER TABLE units ADD COLUMN sandbox TEXT;
"""

# ``input`` requests: a client's bytes for the stdin of a unit started with
# stdin=True (``send_input``). SQLite cannot change a CHECK constraint: the
# table is made again, its rows and its sequence kept (a seq is never reused).
_V11 = """
CREATE TABLE requests_v11 (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    verb       TEXT NOT NULL
               CHECK (verb IN ('submit', 'cancel', 'kill', 'retain', 'release', 'input')),
    target     TEXT NOT NULL,
    args       BLOB NOT NULL,
    created_at REAL NOT NULL,
    taken_at   REAL,
    taken_by   TEXT,
    done_at    REAL,
    result     BLOB
);
INSERT INTO requests_v11 (seq, verb, target, args, created_at, taken_at, taken_by, done_at, result)
    SELECT seq, verb, target, args, created_at, taken_at, taken_by, done_at, result FROM requests;
DELETE FROM sqlite_sequence WHERE name = 'requests_v11';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'requests_v11', seq FROM sqlite_sequence WHERE name = 'requests';
DROP TABLE requests;
ALTER TABLE requests_v11 RENAME TO requests;
CREATE INDEX requests_open ON requests (seq) WHERE taken_at IS NULL;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11)
"""``MIGRATIONS[n - 1]`` takes the schema from version ``n - 1`` to ``n``."""

SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, where: str, migrations: Sequence[str] = MIGRATIONS) -> int:
    """Bring the database up to ``len(migrations)``; return the version it had before.

    ``conn`` must be in autocommit mode (``isolation_level=None``). ``where``
    names the file in error messages.
    """
    target = len(migrations)
    found = user_version(conn)
    _check_version(found, target, where)
    if found > 0:
        _check_ours(conn, where)
    if found == target:
        return found  # the common case, without taking the write lock
    before = found
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have migrated.
            current = user_version(conn)
            _check_version(current, target, where)
            if current == target:
                conn.execute("COMMIT")
                return before
            if current == 0:
                _claim(conn, where)
            # executescript() would COMMIT first; run the statements one by one
            # so the step and its version bump are one transaction.
            for statement in _statements(migrations[current]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {current + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def start_incremental(conn: sqlite3.Connection) -> None:
    """On a file SQLite has not written yet, choose incremental vacuum: no VACUUM needed.

    Must run before anything writes the file (``journal_mode = WAL`` does).
    """
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
        conn.execute(f"PRAGMA auto_vacuum = {INCREMENTAL}")


def switch_to_incremental_vacuum(conn: sqlite3.Connection) -> bool:
    """Turn on incremental vacuum in a ledger made without it; True once it is on.

    Runs a VACUUM (a new copy of the database, atomic: a crash leaves the old
    one) once per ledger: the mode is stored in the file, and later opens find
    it on and do nothing. VACUUM needs the database to itself for a moment:
    when another connection is mid-transaction it is busy, and the switch waits
    for the next open (False). ``conn`` is in autocommit mode.
    """
    if int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == INCREMENTAL:
        return True
    conn.execute(f"PRAGMA auto_vacuum = {INCREMENTAL}")
    try:
        conn.execute("VACUUM")
        # VACUUM may renumber the rowids of a table without an INTEGER PRIMARY KEY, such
        # as units; its search index finds rows by rowid, so it is built again.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'units_text'").fetchone():
            conn.execute("INSERT INTO units_text (units_text) VALUES ('rebuild')")
        # The copy went through the WAL: give that space back too (best effort).
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.OperationalError:
        return False
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == INCREMENTAL


def check_readable(conn: sqlite3.Connection, where: str) -> None:
    """For a read-only connection: the ledger is ours and at this schema (nothing is migrated)."""
    target = len(MIGRATIONS)
    found = user_version(conn)
    _check_version(found, target, where)
    if found < target:
        raise LedgerVersionError(
            f"the ledger {where} has schema version {found} and needs migrating to {target}, "
            f"which a read-only opener cannot do; open it once where it is writable"
        )
    _check_ours(conn, where)


def _check_version(found: int, target: int, where: str) -> None:
    if found > target:
        raise LedgerVersionError(
            f"the ledger {where} has schema version {found}, but this workunits understands "
            f"versions up to {target}: it was written by a newer workunits. Upgrade workunits "
            f"to open it, or use another state dir; never edit the ledger to downgrade it."
        )


def _check_ours(conn: sqlite3.Connection, where: str) -> None:
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id != APPLICATION_ID:
        raise LedgerCorrupt(
            f"{where} is an SQLite database but not a workunits ledger "
            f"(application_id {app_id:#x}); point state_dir elsewhere"
        )


def _claim(conn: sqlite3.Connection, where: str) -> None:
    """Mark an empty database as a workunits ledger, refusing anyone else's file."""
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    tables = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table'").fetchone()
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and int(tables[0]) > 0):
        raise LedgerCorrupt(
            f"{where} is an SQLite database but not a workunits ledger "
            f"(application_id {app_id:#x}, {tables[0]} tables); point state_dir elsewhere"
        )
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def _statements(script: str) -> list[str]:
    """Split a migration into statements (none of ours has ';' inside a literal).

    A trigger's body (SQLite: ``BEGIN ... END``) and a function's (PostgreSQL:
    between ``$$``) hold statements of their own: their ';' do not split.
    """
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    out: list[str] = []
    held = ""
    for piece in "\n".join(lines).split(";"):
        held = f"{held};{piece}" if held else piece
        text = held.upper()
        open_trigger = "CREATE TRIGGER" in text and "BEGIN" in text and not _ends_block(held)
        if open_trigger or held.count("$$") % 2:
            continue
        if held.strip():
            out.append(held.strip())
        held = ""
    if held.strip():
        out.append(held.strip())
    return out


def _ends_block(text: str) -> bool:
    """Whether a trigger's text so far has reached the END of its body."""
    return text.rstrip().upper().endswith("END")


# For the PostgreSQL counterpart (postgres_schema), which shares these rules.
check_version = _check_version
statements = _statements
