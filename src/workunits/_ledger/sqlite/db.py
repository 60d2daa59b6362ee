"""One SQLite connection to the ledger file, with the transaction discipline every write follows.

- The state dir was checked (``statedir``) and the database is 0600 *before*
  SQLite opens it; SQLite gives its ``-wal`` and ``-shm`` files the database
  file's mode.
- A read-only connection (a state dir this process may not write in) creates,
  chmods and migrates nothing; it reads the ledger as it is. SQLite needs the
  ``-shm`` file to read a WAL database, and cannot create it there: when no
  ``-wal`` exists either, no writer has the ledger open (a writer keeps it while
  connected), so the file is opened ``immutable``, read without any lock.
- ``verify=True`` (a supervisor) runs ``PRAGMA quick_check`` before anything is
  written: a damaged ledger is refused before a session row lands in it.
- Autocommit mode (``isolation_level=None``): transactions are explicit. Every
  write opens with ``BEGIN IMMEDIATE``, taking the write lock up front, so a
  transaction that started as a reader never meets ``SQLITE_BUSY`` half-way
  (DESIGN §9); ``busy_timeout`` makes contenders queue instead of failing.
- ``synchronous`` is chosen per transaction: FULL (the WAL is fsynced at
  commit) for what must survive a power cut -- submits, terminal writes,
  checkpoints -- and NORMAL for grouped progress, which a crash may lose.
  A ledger opened with ``sync="normal"`` uses NORMAL for all of them: every
  commit still survives the crash of any process, not of the OS or machine.
- SQLite error codes become workunits errors that say what happened and that
  nothing was written.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from workunits._core.errors import LedgerCorrupt, LedgerError, LedgerFull, SpecError, StateDirError
from workunits._ledger.inplace import FilesInPlace
from workunits._ledger.sqlite import schema

DB_FILE = "ledger.db"
# What a durable transaction (submit, terminal write, checkpoint) is synced as.
SYNC_MODES = {"full": "FULL", "normal": "NORMAL"}


def sync_level(mode: str, name: str = "sync") -> str:
    """The ``synchronous`` level of a sync mode; SpecError naming ``name`` if unknown."""
    level = SYNC_MODES.get(mode) if isinstance(mode, str) else None
    if level is None:
        raise SpecError(f"{name} must be one of {sorted(SYNC_MODES)}, got {mode!r}")
    return level


def create_private_file(path: Path) -> None:
    """Create ``path`` 0600 if missing; refuse a symlink planted in its place.

    A file that exists is looked at (``lstat``) but never opened. Closing any
    descriptor of an SQLite file drops every POSIX lock this process holds on
    it -- those of another Ledger's connection included (SQLite's "broken
    POSIX locks"). Without its lock on the ``-shm`` file, that connection is
    invisible to other processes: the last of them to close deletes the WAL
    under it, and it never sees another process's commits again.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            info = os.lstat(path)  # another opener created it first
        except OSError as exc:
            raise LedgerError(f"cannot create {path}: {exc.strerror}") from exc
        else:
            os.close(fd)  # nobody can hold a lock on a file that did not exist
            return
    if stat.S_ISLNK(info.st_mode):
        raise LedgerError(f"cannot open {path}: it is a symlink, and the ledger follows none")
    if not stat.S_ISREG(info.st_mode):
        raise LedgerError(f"{path} is not a regular file")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o600)


class SqliteDatabase:
    """The connection and its lock; safe to share between the threads of one process."""

    def __init__(
        self,
        state_dir: Path,
        *,
        busy_timeout: float,
        sync: str = "full",
        readonly: bool = False,
        verify: bool = False,
        key_file: Path | None = None,
    ) -> None:
        """``key_file``: the key that signs its values, watched with its files (``inplace``)."""
        self._durable_level = sync_level(sync)
        self.path = state_dir / DB_FILE
        self.readonly = readonly
        self.row_locks = False  # one writer at a time: nothing to lock rows against
        self.dialect = "sqlite"
        self._busy_timeout = busy_timeout
        if not readonly:
            create_private_file(self.path)
            for suffix in ("-wal", "-shm"):
                sidecar = self.path.with_name(DB_FILE + suffix)
                if sidecar.exists():
                    create_private_file(sidecar)
        self._pid = os.getpid()
        # One connection per Ledger; the lock serialises this process's threads on it.
        # Unlike the others it is held across I/O (a transaction, its fsync, a busy
        # wait): it guards the connection itself. Nothing that must stay responsive
        # (the Reaper, a unit's channel) ever takes it.
        self._lock = threading.RLock()
        # How long each COMMIT took (the fsync, when durable), newest last; bounded,
        # and drained by whoever reports them (the HTTP API's /metrics).
        self.commit_seconds: deque[float] = deque(maxlen=4096)
        self._writes = 0  # write transactions begun here: part of ``version``
        self._sync = ""
        try:
            self._open(verify, immutable=False)
        except LedgerError:
            if not (readonly and self._may_be_immutable()):
                raise
            self._open(verify, immutable=True)
        # A writer's files must stay where they are (invariant 17); see ``inplace``.
        watched = {self.path: "the ledger", self.path.with_name(DB_FILE + "-wal"): "the ledger"}
        if key_file is not None:
            watched[key_file] = "the key"
        self.in_place = None if readonly else FilesInPlace(watched)

    def _open(self, verify: bool, *, immutable: bool) -> None:
        """Connect and set up, closed again if that fails: a read-only ledger tries twice."""
        self.conn = self._connect(immutable=immutable)
        try:
            with self._lock:
                self._setup(verify)
        except BaseException:
            self.conn.close()
            raise

    def _connect(self, *, immutable: bool) -> sqlite3.Connection:
        target: str | Path = self.path
        if self.readonly:
            flags = "mode=ro&immutable=1" if immutable else "mode=ro"
            target = f"file:{urllib.parse.quote(str(self.path))}?{flags}"
        try:
            conn = sqlite3.connect(
                target,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=self.readonly,
            )
        except sqlite3.Error as exc:
            raise self._mapped(exc) from exc
        conn.row_factory = sqlite3.Row
        return conn

    def _may_be_immutable(self) -> bool:
        # A writer keeps the -wal file while it is connected; without one, the
        # database file alone is the whole ledger and nobody is changing it.
        return not self.path.with_name(DB_FILE + "-wal").exists()

    def _setup(self, verify: bool) -> None:
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            # Statement journals and sorts in memory, not in temporary files: a
            # write must not need a new descriptor, or a process out of them
            # (EMFILE) could not even record the failures it causes.
            self.conn.execute("PRAGMA temp_store = MEMORY")
            if verify:
                self._quick_check()
            if self.readonly:
                schema.check_readable(self.conn, str(self.path))
                return
            schema.start_incremental(self.conn)
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            self.conn.execute("PRAGMA foreign_keys = OFF")
            if schema.migrate(self.conn, str(self.path)) < schema.SCHEMA_VERSION:
                # A migration's pages need not wait in the WAL for SQLite's
                # automatic checkpoint (best effort: a reader may hold it).
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._switch_to_incremental_vacuum()
        except sqlite3.Error as exc:
            raise self._mapped(exc) from exc

    def _switch_to_incremental_vacuum(self) -> None:
        # Briefly, not for the whole busy timeout: when others are in the
        # ledger the switch waits for a later open, and this one goes on.
        self.conn.execute("PRAGMA busy_timeout = 200")
        try:
            schema.switch_to_incremental_vacuum(self.conn)
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")

    def give_back_space(self) -> None:
        """Return the ledger's free pages to the file system and empty the WAL.

        After a gc or an expiry: ``incremental_vacuum`` truncates the free
        pages off the database, then a TRUNCATE checkpoint resets the WAL those
        changes went through. Both are best effort (a reader may hold the WAL).
        """
        self._check_process()  # first: a fork may have left the lock held for ever
        with self._lock:
            if self.readonly:
                return
            try:
                # executescript steps the statement to its end; execute() would
                # step it once, and each step frees a single page.
                self.conn.executescript("PRAGMA incremental_vacuum;")
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as exc:
                raise self._mapped(exc) from exc

    def backup_to(self, target: sqlite3.Connection) -> None:
        """Copy the database, as of one transaction, into ``target`` (SQLite's backup API)."""
        self._check_process()  # first: a fork may have left the lock held for ever
        with self._lock:
            try:
                self.conn.backup(target)
            except sqlite3.Error as exc:
                raise self._mapped(exc) from exc

    def _quick_check(self) -> None:
        found = [str(row[0]) for row in self.conn.execute("PRAGMA quick_check(5)").fetchall()]
        if found != ["ok"]:
            raise LedgerCorrupt(
                f"{self.path} is damaged ({'; '.join(found)}); nothing was written to it. "
                f"Restore it from a backup, or move the state dir aside to start afresh"
            )

    @property
    def where(self) -> str:
        return str(self.path)

    def close(self) -> None:
        with self._lock:
            self.conn.close()
        if self.in_place is not None:
            self.in_place.close()

    def version(self) -> tuple[int, int]:
        """Changes whenever the ledger may have: another connection committed (SQLite's
        ``data_version``, one cheap read of the WAL index), or this one began a write."""
        self._check_process()
        with self._lock:
            try:
                (changed_elsewhere,) = self.conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error as exc:
                raise self._mapped(exc) from exc
            return int(changed_elsewhere), self._writes

    @contextlib.contextmanager
    def write(
        self,
        *,
        durable: bool,
        wake: str | None = None,
    ) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction; committed on success, rolled back on any error.

        ``durable`` selects ``synchronous=FULL`` for this transaction (NORMAL
        when the ledger was opened with ``sync="normal"``). ``wake`` is for
        PostgreSQL's listening supervisors (``backend``); SQLite has none.
        """
        self._check_process()  # first: a fork may have left the lock held for ever
        with self._lock:
            if self.readonly:
                raise StateDirError(
                    f"the state dir {self.path.parent} is read-only here, so this ledger was "
                    f"opened for reading; nothing was written"
                )
            conn = self.conn
            place = self.in_place
            if place is not None:
                place.check()  # LedgerGone: nothing goes into a file nobody will open again
            self._writes += 1  # counted even if it rolls back: a version may change for nothing
            try:
                self._set_sync(self._durable_level if durable else "NORMAL")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    started = time.perf_counter()
                    conn.execute("COMMIT")
                    self.commit_seconds.append(time.perf_counter() - started)
                    if place is not None:
                        # Gone while it was written: it did not land anywhere that counts.
                        place.check()
                finally:
                    # Reached with a transaction open only when something failed:
                    # COMMIT itself, or the body.
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise self._mapped(exc) from exc

    @contextlib.contextmanager
    def read(self, *, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot for several statements.

        ``timeout`` is PostgreSQL's (the wait for a connection); a file needs none."""
        self._check_process()  # first: a fork may have left the lock held for ever
        with self._lock:
            conn = self.conn
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise self._mapped(exc) from exc

    def _set_sync(self, level: str) -> None:
        # A no-op PRAGMA still costs a statement; skip it when nothing changes.
        if self._sync != level:
            self.conn.execute(f"PRAGMA synchronous = {level}")
            self._sync = level

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise LedgerError(
                f"this Ledger was opened in process {self._pid}; an SQLite connection must "
                f"not cross a fork, so open a new Ledger in process {os.getpid()}"
            )

    def _mapped(self, exc: sqlite3.Error) -> LedgerError:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary result code
        where = self.path
        if code == sqlite3.SQLITE_FULL:
            return LedgerFull(
                f"the disk holding the state dir ({where.parent}) is full; the transaction was "
                f"rolled back and nothing was written. Free space there and retry"
            )
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return LedgerError(
                f"{where} stayed locked by another process for more than "
                f"{self._busy_timeout} s; nothing was written. Retry, or raise busy_timeout"
            )
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return LedgerCorrupt(f"{where} is damaged or not an SQLite database: {exc}")
        if code == sqlite3.SQLITE_READONLY:
            return LedgerError(f"{where} is read-only here: {exc}; nothing was written")
        return LedgerError(f"{where}: {exc}")
