"""A ledger in PostgreSQL, named by a ``postgresql://`` URL (the ``[postgres]`` extra).

The counterpart of ``sqlite.db.SqliteDatabase`` (see ``backend`` for the seam):

- Connections come from a small pool (``psycopg_pool``), so the threads of
  one process do not queue behind one connection; none crosses a fork.
- A write transaction starts by taking one transaction-scoped advisory lock,
  the ledger's write lock: like SQLite's ``BEGIN IMMEDIATE``, every writer
  runs alone from its first statement, in READ COMMITTED, so each statement
  sees everything committed before the lock was granted. Waiting for it is
  bounded by ``lock_timeout`` (the busy timeout). A holder that stops
  talking inside its transaction (a process SIGSTOPped, swapped out, paused
  in a debugger) would hold every writer of the cluster, the takeover of
  its own session included; so the server ends a session idle inside a
  transaction for ``idle_limit`` (``idle_in_transaction_session_timeout``;
  default half the busy timeout, so before its waiters give up; a
  supervisor sets a quarter of its session lease, so that the stall lapses
  no live supervisor's lease), rolling it back and freeing the lock. The
  frozen process, once it runs again, finds its connection gone: the write
  fails as a lost ledger, and is retried on a new connection. Rows of several
  supervisors are also claimed with ``FOR UPDATE SKIP LOCKED`` (``claims``).
- A read is a ``REPEATABLE READ, READ ONLY`` transaction: one snapshot.
- Durability per transaction: ``synchronous_commit`` is turned off for a
  non-durable one (the counterpart of ``synchronous=NORMAL``); a crash of the
  server may lose it, never a durable commit after it.
- psycopg's errors become workunits errors that say nothing was written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workunits._core.errors import CommitUnknown, LedgerError, LedgerFull, StateDirError
from workunits._ledger.backend import WAKE_CHANNEL, DbCursor
from workunits._ledger.postgres import schema as postgres_schema
from workunits._ledger.postgres import sql as postgres_sql
from workunits._ledger.sqlite.db import sync_level

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

log = logging.getLogger(__name__)

# The advisory lock every write takes: "wuL1" in ASCII, as SQLite's application_id.
WRITE_LOCK = 0x77754C31
POOL_SIZE = 4
RECONNECT_TRIES_FOR = 2.0  # seconds of background reconnects after a connection is lost


def _import_driver() -> tuple[Any, Any]:
    try:
        import psycopg  # noqa: PLC0415 - the optional [postgres] extra
        import psycopg_pool  # noqa: PLC0415
    except ImportError as exc:
        raise LedgerError(
            f"a postgresql:// ledger needs psycopg 3 and psycopg-pool ({exc.name} is missing): "
            f"pip install 'workunits[postgres]'"
        ) from None
    return psycopg, psycopg_pool


class PgRow(tuple[Any, ...]):
    """A row by position or by column name, as ``sqlite3.Row`` is.

    Names match as ``sqlite3.Row``'s do, whatever their case (``row["ID"]`` is
    ``row["id"]``), so code written against one ledger reads the other's rows.
    """

    _names: _PgColumns

    def __new__(cls, values: Sequence[Any], names: _PgColumns) -> PgRow:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(self._names.index(key))
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._names.names)


class _PgColumns:
    """One result's column names, shared by its rows: in order, and by name in any case."""

    __slots__ = ("by_folded_name", "names")

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.by_folded_name: dict[str, int] = {}
        for i, name in enumerate(names):
            self.by_folded_name.setdefault(name.casefold(), i)  # the first wins, as in sqlite3

    def index(self, name: str) -> int:
        try:
            return self.by_folded_name[name.casefold()]
        except KeyError:
            raise IndexError(f"no column named {name!r}") from None


def _watched(driver: Any, away: Callable[[], None]) -> Any:
    """psycopg's connection class, telling ``away`` when a new connection cannot be made:
    the pool makes them in its own threads, and says so only to its log."""

    class WatchedConnection(driver.Connection):  # type: ignore[misc]
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().connect(*args, **kwargs)
            except driver.Error:
                away()
                raise

    return WatchedConnection


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    names = _PgColumns(() if description is None else [col.name for col in description])

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, names)

    return make


class PgConnection:
    """A psycopg connection that runs the modules' SQLite SQL (``postgres.sql``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Any = (), /) -> DbCursor:
        return self._conn.execute(postgres_sql.translate(sql), _text_safe(parameters) or None)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> DbCursor:
        cursor = self._conn.cursor()
        cursor.executemany(postgres_sql.translate(sql), [_text_safe(p) for p in parameters])
        return cursor


def _text_safe(parameters: Any) -> Any:
    """``parameters`` with each NUL in a str written as U+FFFD.

    PostgreSQL's text cannot hold NUL, and a statement that tries fails its whole
    transaction: a unit's error text or progress message with one in it would
    keep its end from ever being written. What users submit (keys, descriptions)
    is refused with a NUL at submit, on either ledger; what units report is free
    text, kept here with the character shown as U+FFFD.
    """
    if isinstance(parameters, Mapping):
        if any(isinstance(v, str) and "\x00" in v for v in parameters.values()):
            return {k: _nul_free(v) for k, v in parameters.items()}
        return parameters
    if any(isinstance(v, str) and "\x00" in v for v in parameters):
        return [_nul_free(v) for v in parameters]
    return parameters


def _nul_free(value: Any) -> Any:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


_PAYLOAD = re.compile(r"[a-z]+:[0-9a-z]{1,64}", re.ASCII)


def _checked_payload(wake: str) -> str:
    """``wake`` when it is ``<what>:<id>``; it goes into SQL text, so nothing else passes."""
    if _PAYLOAD.fullmatch(wake) is None:
        raise LedgerError(f"a wake payload is <what>:<id> in lower-case ASCII, got {wake!r}")
    return wake


def redacted(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class PostgresDatabase:
    """A pool of connections to one PostgreSQL ledger; safe to share between threads."""

    readonly = False
    row_locks = True  # SELECT ... FOR UPDATE SKIP LOCKED (see ``claims``)
    dialect = "postgresql"

    def __init__(
        self, url: str, *, busy_timeout: float, sync: str = "full", idle_limit: float | None = None
    ) -> None:
        self._durable_off = sync_level(sync) != "FULL"
        self._where = redacted(url)
        self._busy_timeout = busy_timeout
        driver, pool_module = _import_driver()
        self._errors = driver
        self._pid = os.getpid()
        # The pool hands each thread its own connection; this lock guards `_closed` and
        # `_away_since`, two fields.
        self._lock = threading.Lock()
        self._closed = False
        # Since when the server could not be reached (monotonic), until a transaction
        # completes again: then one line says it answers again (``_back``).
        self._away_since: float | None = None
        lock_ms = max(1, int(busy_timeout * 1000))
        idle_ms = max(1, lock_ms // 2 if idle_limit is None else int(idle_limit * 1000))

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute(f"SET lock_timeout = {lock_ms}")
            conn.execute(f"SET idle_in_transaction_session_timeout = {idle_ms}")

        try:
            self._pool: psycopg_pool.ConnectionPool[Any] = pool_module.ConnectionPool(
                url,
                connection_class=_watched(driver, self._away),
                min_size=1,
                max_size=POOL_SIZE,
                kwargs={"autocommit": True, "row_factory": _row_factory},
                configure=configure,
                open=False,
                name="workunits-ledger",
                # After a lost connection the pool retries in the background with a
                # doubling delay; past this it stops, and the next use tries at once.
                # Left at its default (5 min), the delay grows to minutes: a server
                # back after a restart would wait for the pool's next try.
                reconnect_timeout=RECONNECT_TRIES_FOR,
            )
            self._pool.open(wait=True, timeout=busy_timeout)
        except (driver.Error, pool_module.PoolTimeout) as exc:
            raise LedgerError(
                f"cannot connect to the ledger {self._where}: {exc}; check the URL and that "
                f"the server runs"
            ) from None
        try:
            with self._connection() as conn:
                postgres_schema.migrate(conn, self._where, WRITE_LOCK)
        except BaseException:
            self._pool.close()
            raise

    @property
    def where(self) -> str:
        return self._where

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()

    @contextlib.contextmanager
    def _connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        if os.getpid() != self._pid:
            raise LedgerError(
                f"this Ledger was opened in process {self._pid}; a PostgreSQL connection must "
                f"not cross a fork, so open a new Ledger in process {os.getpid()}"
            )
        if self._closed:
            raise LedgerError(f"the ledger {self._where} was closed")
        try:
            wait = self._busy_timeout if timeout is None else timeout
            with self._pool.connection(timeout=wait) as conn:
                yield conn
        except self._errors.Error as exc:
            if isinstance(exc, self._errors.OperationalError) and exc.sqlstate is None:
                self._away()  # no answer from the server (a lock timeout has one)
            raise self._mapped(exc) from exc
        except CommitUnknown:
            self._away()
            raise
        if self._away_since is not None:  # read without the lock: a hint, checked under it
            self._back()

    def _away(self) -> None:
        """The server could not be reached (any thread)."""
        with self._lock:
            if self._away_since is None:
                self._away_since = time.monotonic()

    def _back(self) -> None:
        """A transaction completed after the server was away: say so, once."""
        with self._lock:
            since, self._away_since = self._away_since, None
        if since is not None:
            log.warning(
                "ledger: %s answers again (after %.1f s away)",
                self._where,
                time.monotonic() - since,
                extra={"ledger_recovered": True},
            )

    @contextlib.contextmanager
    def write(self, *, durable: bool, wake: str | None = None) -> Iterator[PgConnection]:
        if self.readonly:
            raise StateDirError(f"the ledger {self._where} was opened for reading; nothing written")
        begin = "BEGIN; "
        if self._durable_off or not durable:
            begin += "SET LOCAL synchronous_commit = off; "
        if wake is not None:
            # Sent when the transaction commits, never if it rolls back; in the
            # begin statement so it costs no round trip of its own.
            begin += f"NOTIFY {WAKE_CHANNEL}, '{_checked_payload(wake)}'; "
        begin += f"SELECT pg_advisory_xact_lock({WRITE_LOCK})"
        with self._connection() as conn, _transaction(conn, begin, self._where):
            yield PgConnection(conn)

    @contextlib.contextmanager
    def read(self, *, timeout: float | None = None) -> Iterator[PgConnection]:
        """A snapshot; ``timeout`` bounds the wait for a connection (default: the busy timeout)."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
        with self._connection(timeout) as conn, _transaction(conn, begin):
            yield PgConnection(conn)

    def version(self) -> None:
        """None: other hosts write too, and their wake-ups come by LISTEN/NOTIFY; every
        poll reads."""

    def give_back_space(self) -> None:
        """Nothing to do: autovacuum reclaims dead rows for reuse; a VACUUM FULL is
        an operator's call (it locks every table), not the ledger's."""

    def _mapped(self, exc: Exception) -> LedgerError:
        errors = self._errors.errors
        if isinstance(exc, errors.DiskFull):
            return LedgerFull(
                f"the disk of the ledger {self._where} is full; the transaction was rolled back "
                f"and nothing was written. Free space there and retry"
            )
        if isinstance(exc, errors.LockNotAvailable | errors.QueryCanceled):
            return LedgerError(
                f"{self._where} stayed locked by another writer for more than "
                f"{self._busy_timeout} s; nothing was written. Retry, or raise busy_timeout"
            )
        if isinstance(exc, self._errors.OperationalError):
            return LedgerError(f"lost the ledger {self._where}: {exc}; nothing was written")
        return LedgerError(f"{self._where}: {exc}")


@contextlib.contextmanager
def _transaction(
    conn: psycopg.Connection[Any], begin: str, where: str | None = None
) -> Iterator[None]:
    """``begin`` (one round trip), then COMMIT on success or ROLLBACK on any error.

    A COMMIT whose answer never came (the connection dropped after the server
    may have received it) raises CommitUnknown: the server may have committed,
    so "nothing was written" would be a lie. The writer settles it by reading
    back (``settle``). A COMMIT the server answered with an error is definite:
    the transaction was rolled back. ``where`` (the ledger, for the message) is
    given for a write; a read's COMMIT ends a snapshot, and commits nothing.
    """
    conn.execute(begin)  # fixed text, no parameters
    try:
        yield
    except BaseException:
        if not conn.closed:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except Exception as exc:
        if where is None or (getattr(exc, "sqlstate", None) is not None and not conn.broken):
            raise  # a read, or the server answered: rolled back
        raise CommitUnknown(
            f"lost the ledger {where} while a write committed ({exc}); whether it landed "
            f"is not known yet"
        ) from exc
