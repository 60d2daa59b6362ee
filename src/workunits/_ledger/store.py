"""``Ledger``: the durable store of work units, in ``<state_dir>/ledger.db`` or PostgreSQL.

The embedded default is SQLite in the state dir. ``ledger="postgresql://..."``
keeps the ledger in PostgreSQL instead (``postgres``), while the state dir
keeps what is local: output files, transcripts, the signing key, the lock.
Both backends sit behind one seam (``backend``); every method here runs the
same on either.

Safe to use from several processes at once (SQLite WAL, ``BEGIN IMMEDIATE``
on every write, a busy timeout; in PostgreSQL an advisory write lock) and
from several threads of one process. Each process opens its own ``Ledger``.

Durability: submits, terminal writes, checkpoints, requests and session
open/close are fully synced (``synchronous=FULL``); grouped non-terminal
transitions, progress and delivery marks use NORMAL. A killed process loses
no committed transaction either way; a power cut or OS crash may lose NORMAL
commits made since the last fully synced one -- WAL keeps commits in order,
so each fully synced commit makes every earlier one durable too.
"""

from __future__ import annotations

import os
from pathlib import Path

from workunits._core.clock import Clock, SystemClock
from workunits._core.errors import LedgerCorrupt, LedgerError, NoLedger, SpecError
from workunits._ledger import secretfile, settle, statedir, values, valuestore
from workunits._ledger.attempts import Attempts
from workunits._ledger.backend import Database as Backend
from workunits._ledger.backend import is_url
from workunits._ledger.claims import Claims
from workunits._ledger.context import LedgerContext
from workunits._ledger.fence import FencedDatabase
from workunits._ledger.inplace import FilesInPlace
from workunits._ledger.largevalues import LargeValues
from workunits._ledger.listing import Listing
from workunits._ledger.outbox import Outbox
from workunits._ledger.postgres.valuestore import DatabaseValueStore
from workunits._ledger.requests import Requests
from workunits._ledger.retains import Retains
from workunits._ledger.retention import Retention
from workunits._ledger.schedules import Schedules
from workunits._ledger.sessions import Sessions
from workunits._ledger.signals import Signals
from workunits._ledger.sqlite import backup as backup_mod
from workunits._ledger.sqlite.db import DB_FILE, SqliteDatabase
from workunits._ledger.units import Units

DEFAULT_EXPIRE_AFTER = 7 * 24 * 3600.0
DEFAULT_BUSY_TIMEOUT = 10.0


class Ledger:
    """The ledger of one state dir: one object per table or concern, and the connection.

    ``units`` (submit and read), ``listing`` (pages, totals, counts),
    ``attempts`` (the fenced writes of a unit's attempt: records, progress,
    checkpoints, the next attempt), ``outbox`` (notices), ``retains``
    (leases), ``requests`` (other processes' commands), ``signals``,
    ``schedules``, ``sessions`` (supervisor runs and takeovers), ``claims``
    (pending units a session takes) and ``retention`` (expiry, gc). They share
    this Ledger's connection (``LedgerContext``): ``fence`` puts every one of
    them behind the session fence at once. Every method runs in the calling
    thread.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        sync: str = "full",
        verify: bool = False,
        large_value: int = valuestore.LARGE_VALUE,
        ledger: str | None = None,
        secret: secretfile.SharedSecret | None = None,
        idle_limit: float | None = None,
        settle_within: float = settle.SETTLE_WITHIN,
        _readonly: bool = False,
    ) -> None:
        """``sync="normal"`` trades power-cut durability for latency (see ``sqlite.db``).

        ``verify=True`` checks the whole file (``PRAGMA quick_check``) before
        anything is written: LedgerCorrupt for a damaged one. A supervisor does.
        ``ledger``, a ``postgresql://`` URL, keeps the ledger there instead of
        in the state dir (the ``[postgres]`` extra). ``secret`` (a shared secret
        file, ``secretfile``) signs and verifies stored values in place of the
        state dir's own key: what every host on one shared ledger needs.
        ``idle_limit``: how long
        the server lets one of its connections sit idle inside a transaction
        before ending it (default half ``busy_timeout``; see ``postgres``).
        ``settle_within``: how long a write whose COMMIT lost its answer keeps
        trying to read back what happened (``settle``) before CommitUnknown.
        """
        # open_existing has checked a read-only state dir already; a writer checks here.
        self.state_dir = Path(state_dir) if _readonly else statedir.prepare(state_dir)
        self._clock = clock or SystemClock()
        self._db: Backend  # until a fence wraps it: ``_ctx.db`` is the one in use
        if ledger is not None:
            self._db = _open_postgres(
                ledger, busy_timeout=busy_timeout, sync=sync, idle_limit=idle_limit
            )
        else:
            _refuse_an_emptied_ledger(self.state_dir)
            self._db = SqliteDatabase(
                self.state_dir,
                busy_timeout=busy_timeout,
                sync=sync,
                readonly=_readonly,
                verify=verify,
                key_file=self.state_dir / values.KEY_FILE if secret is None else secret.path,
            )
        try:
            key: bytes | None = (
                secret.spec_key
                if secret is not None
                else values.load_key(self.state_dir)
                if _readonly
                else values.load_or_create_key(self.state_dir)
            )
        except BaseException:
            self._db.close()
            raise
        self._shared = not isinstance(self._db, SqliteDatabase)  # before a fence wraps it
        self._url = ledger
        self._secret = secret
        # On PostgreSQL every host must read what any host stored: the database keeps it.
        store: valuestore.ValueStore = (
            valuestore.FileValueStore(self.state_dir)
            if isinstance(self._db, SqliteDatabase)
            else DatabaseValueStore(self._db)
        )
        self._ctx = LedgerContext(
            self._db,
            state_dir=self.state_dir,
            clock=self._clock,
            key=key,
            large=LargeValues(store, key, large_value),
            expire_after=expire_after,
            settle_within=settle_within,
        )
        self.outbox = Outbox(self._ctx)
        self.listing = Listing(self._ctx)
        self.units = Units(self._ctx, self.outbox, self.listing)
        self.attempts = Attempts(self._ctx, self.units)
        self.retains = Retains(self._ctx)
        self.requests = Requests(self._ctx)
        self.signals = Signals(self._ctx)
        self.schedules = Schedules(self._ctx, self.units)
        self.sessions = Sessions(self._ctx)
        self.claims = Claims(self._ctx)
        self.retention = Retention(self._ctx)
        # The key must stay where it is too (invariant 17; see ``inplace``): the SQLite
        # ledger watches it with its files, before every write; a PostgreSQL one here.
        key_file = self.state_dir / values.KEY_FILE if secret is None else secret.path
        watch_key = not _readonly and not isinstance(self._db, SqliteDatabase)
        self._key_in_place = FilesInPlace({key_file: "the key"}) if watch_key else None

    def check_in_place(self) -> None:
        """LedgerGone when the ledger's file, its -wal or the key was deleted, replaced or
        moved since it was opened (a PostgreSQL ledger has no file: its key alone)."""
        if isinstance(self._db, SqliteDatabase) and self._db.in_place is not None:
            self._db.in_place.check()
        if self._key_in_place is not None:
            self._key_in_place.check()

    @classmethod
    def open_existing(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        secret: secretfile.SharedSecret | None = None,
    ) -> Ledger:
        """Open the ledger of ``state_dir``; NoLedger when there is none (nothing is created).

        For readers such as the CLI's ``ls``: looking must not leave an empty
        ledger (or state dir) behind in a directory given by mistake. In a state
        dir this process may not write in, the ledger opens read-only (``readonly``):
        reads work, and every write raises StateDirError.
        """
        checked, writable = statedir.open_for_reading(state_dir)
        path = checked / DB_FILE
        if not path.is_file():
            raise NoLedger(
                f"{checked} holds no workunits ledger (no {DB_FILE}); check the state "
                f"dir, or start one with `workunits serve --state {checked}`"
            )
        return cls(
            checked, clock=clock, busy_timeout=busy_timeout, secret=secret, _readonly=not writable
        )

    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        create: bool,
        clock: Clock | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        ledger: str | None = None,
        secret: secretfile.SharedSecret | None = None,
    ) -> Ledger:
        """``open_existing``, or with ``create`` a new ledger where there is none.

        What a client opens: read-only when the state dir is read-only here.
        With ``ledger`` (a PostgreSQL URL) the ledger is there, created or
        migrated as a supervisor would, and the state dir is prepared for the key.
        """
        if ledger is not None:
            return cls(
                state_dir, clock=clock, busy_timeout=busy_timeout, ledger=ledger, secret=secret
            )
        try:
            return cls.open_existing(
                state_dir, clock=clock, busy_timeout=busy_timeout, secret=secret
            )
        except NoLedger:
            if not create:
                raise
        return cls(state_dir, clock=clock, busy_timeout=busy_timeout, secret=secret)

    def sibling(self, *, clock: Clock | None = None) -> Ledger:
        """Another connection to this same ledger (its file or its URL, its secret),
        for a thread that must not queue behind this one's connection."""
        return Ledger.open(
            self.state_dir,
            create=False,
            clock=clock or self._clock,
            ledger=self._url,
            secret=self._secret,
        )

    @property
    def readonly(self) -> bool:
        """True when the state dir is read-only here: reads work, writes raise StateDirError."""
        return self._ctx.db.readonly

    @property
    def path(self) -> Path:
        """The SQLite file; a PostgreSQL ledger has none (LedgerError: see ``where``)."""
        if not isinstance(self._db, SqliteDatabase):
            raise LedgerError(f"the ledger {self._db.where} is in PostgreSQL, not in a file")
        return self._db.path

    @property
    def shared(self) -> bool:
        """True for a PostgreSQL ledger, which hosts other than this one may share."""
        return self._shared

    @property
    def where(self) -> str:
        """The ledger as messages name it: its file, or its URL without the password."""
        return self._db.where

    def close(self) -> None:
        self._ctx.db.close()
        if self._key_in_place is not None:
            self._key_in_place.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def fence(self, session_id: str) -> None:
        """From now on every write of this Ledger, whichever table object makes it, checks
        ``session_id`` was not taken over (SessionLost if it was; see ``fence``). A
        supervisor's, once its session is open."""
        if not isinstance(self._ctx.db, FencedDatabase):
            self._ctx.db = FencedDatabase(self._db, session_id)

    def backup(self, dest: str | os.PathLike[str]) -> backup_mod.BackupReport:
        """Write a consistent copy of this live state dir to ``dest`` (``sqlite.backup``)."""
        if not isinstance(self._db, SqliteDatabase):
            raise LedgerError(
                f"the ledger {self._db.where} is in PostgreSQL: back it up with pg_dump (or "
                f"your server's backups), and copy the state dir's files beside it"
            )
        return backup_mod.backup(self._db, self.state_dir, Path(dest))

    def drain_commit_seconds(self) -> list[float]:
        """How long each write's COMMIT took since the last call (SQLite; empty elsewhere)."""
        kept = getattr(self._ctx.db, "commit_seconds", None)
        if kept is None:
            return []
        drained = []
        while kept:
            drained.append(kept.popleft())
        return drained


def _open_postgres(
    url: str, *, busy_timeout: float, sync: str, idle_limit: float | None
) -> Backend:
    if not is_url(url):
        raise SpecError(
            f"ledger must be a postgresql:// URL (or None for SQLite in the state dir), got {url!r}"
        )
    from workunits._ledger.postgres.db import PostgresDatabase  # noqa: PLC0415 - optional extra

    return PostgresDatabase(url, busy_timeout=busy_timeout, sync=sync, idle_limit=idle_limit)


def _refuse_an_emptied_ledger(state_dir: Path) -> None:
    """LedgerCorrupt for an empty ledger file beside the key a ledger made.

    An empty file is what a fresh ledger starts as, but the key is written
    only after the ledger is set up: with a key beside it, the file was a
    ledger once and has lost its contents. Taking it for a fresh ledger would
    forget every unit while their transcripts and key stay behind.
    """
    path = state_dir / DB_FILE
    try:
        emptied = path.lstat().st_size == 0 and (state_dir / values.KEY_FILE).exists()
    except FileNotFoundError:
        return
    if emptied:
        raise LedgerCorrupt(
            f"{path} is empty, but the key beside it says a ledger lived here: the ledger "
            f"was truncated or damaged. Restore it from a backup, or move the state dir "
            f"aside to start afresh"
        )
