"""The seam between the ledger's modules and the database that holds the ledger.

The modules (``submits``, ``writes``, ``outbox``, ``requests``, ``retains``,
``retention``, ``sessions``, ``store``) speak to a :class:`Database`: a
``write(durable=)`` transaction that holds the ledger's write lock from its
first statement (no other writer runs until it commits), and a ``read()``
snapshot. Each yields a :class:`Connection`, which runs one dialect of SQL
everywhere: SQLite's, with ``?`` placeholders. Two backends implement it:

- ``sqlite.db.SqliteDatabase``: the embedded default, ``<state_dir>/ledger.db``. It yields
  the ``sqlite3`` connection itself, so the SQLite path pays nothing for the seam.
- ``postgres.PostgresDatabase``: a ``postgresql://`` URL (the ``[postgres]``
  extra). Its connection translates each statement once (``postgres.sql``),
  and its write lock is a transaction-scoped advisory lock, the counterpart of
  ``BEGIN IMMEDIATE``.

What differs between the two stays in the backend modules: pragmas, file
modes, locking, durability (``synchronous`` vs ``synchronous_commit``), the
schema's column types and its version bookkeeping (``schema`` and
``postgres.schema``, one migration each per version). SQL that both accept
as written (``ON CONFLICT DO NOTHING``, ``RETURNING``, ``coalesce``) is
written once, in the modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# The LISTEN/NOTIFY channel that wakes supervisors on a PostgreSQL ledger.
WAKE_CHANNEL = "workunits_wake"


def is_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL ledger rather than a state dir."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


class Row(Protocol):
    """A result row: by column name or position (``sqlite3.Row`` is one)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...  # the values, in the columns' order

    def keys(self) -> list[str]: ...


class DbCursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What a transaction yields; statements are SQLite SQL with ``?`` placeholders."""

    def execute(self, sql: str, parameters: Any = ..., /) -> DbCursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> DbCursor: ...


class Database(Protocol):
    """One process's access to a ledger; safe to share between its threads."""

    readonly: bool
    # Whether SELECT ... FOR UPDATE SKIP LOCKED exists here (``claims``).
    row_locks: bool
    # "sqlite" or "postgresql": where the SQL differs beyond what ``postgres_sql``
    # rewrites (text search, ``listing``).
    dialect: str

    @property
    def where(self) -> str:
        """The ledger, as error messages name it (a file, or a URL without its password)."""
        ...

    def write(
        self, *, durable: bool, wake: str | None = None
    ) -> AbstractContextManager[Connection]:
        """A transaction holding the write lock; committed on success, rolled back on error.

        ``durable``: the commit survives a power cut (else only a process crash).
        A COMMIT whose answer was lost (the connection dropped as it committed)
        raises CommitUnknown: the write may have landed. Its writer settles it by
        reading back (``settle``), by the IDs it minted before the write.
        ``wake``: this transaction adds work for a supervisor (a request, a signal,
        a pending unit); on PostgreSQL it also sends ``wake`` (``<what>:<id>``) on
        the ``WAKE_CHANNEL``, delivered when it commits, so listening supervisors
        act now instead of at their next tick (``postgres.listen``). SQLite
        ignores it: its one supervisor polls the file it shares one host with.
        """
        ...

    def read(self, *, timeout: float | None = None) -> AbstractContextManager[Connection]:
        """One consistent snapshot for several statements; ``timeout`` bounds the wait
        for a connection where there is one to wait for (PostgreSQL's pool)."""
        ...

    def version(self) -> object | None:
        """A value that changes whenever the ledger may have changed (another process's
        commit, or a write of this process's); None where that cannot be told cheaply,
        and every poll reads."""
        ...

    def give_back_space(self) -> None:
        """After a gc or an expiry: return freed space (best effort; may do nothing)."""
        ...

    def close(self) -> None: ...
