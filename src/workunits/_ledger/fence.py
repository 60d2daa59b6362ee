"""``FencedDatabase``: a supervisor's ledger, whose every write checks its session first.

A supervisor whose lease lapsed (it was stopped, partitioned, or too slow)
may still be running and writing: progress, checkpoints, ends, pids, claims.
Another supervisor has taken its session over by then (``sessions.take_over``)
and owns its units. The attempt fence (invariant 13) refuses writes of the
attempts that were resumed, but not of units ended ``lost`` (a terminal row
ignores them anyway) or handed back pending (their attempt did not change).
So the session itself is the fence: each write transaction of a supervisor
begins by checking, under the ledger's write lock, that its session was not
taken over, and raises SessionLost if it was. The takeover holds the same
lock, so every write is ordered before it (and the winner sees it) or after
it (and is refused).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

from workunits._ledger import sessions
from workunits._ledger.backend import Connection, Database


class FencedDatabase:
    """``inner`` with ``sessions.check_not_taken(session)`` at the start of each write."""

    def __init__(self, inner: Database, session: str) -> None:
        self.inner = inner
        self.session = sessions.validate(session)
        self.readonly = inner.readonly
        self.row_locks = inner.row_locks
        self.dialect = inner.dialect

    @property
    def where(self) -> str:
        return self.inner.where

    @property
    def commit_seconds(self) -> deque[float] | None:
        """The inner database's COMMIT times (SQLite's; None elsewhere), for ``/metrics``."""
        kept: deque[float] | None = getattr(self.inner, "commit_seconds", None)
        return kept

    @contextlib.contextmanager
    def write(self, *, durable: bool, wake: str | None = None) -> Iterator[Connection]:
        with self.inner.write(durable=durable, wake=wake) as conn:
            sessions.check_not_taken(conn, self.session)
            yield conn

    def read(
        self, *, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[Connection]:
        return self.inner.read(timeout=timeout)

    def version(self) -> object | None:
        return self.inner.version()

    def give_back_space(self) -> None:
        self.inner.give_back_space()

    def close(self) -> None:
        self.inner.close()
