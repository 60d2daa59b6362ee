"""Polls that skip their read while the ledger has not changed since they found nothing.

A supervisor asks the ledger 20 times a second for other processes' work:
requests, signals, pending units to claim. Each ask is a read transaction (and,
when something is there, a write), and on an idle supervisor they were most of
its CPU. SQLite says cheaply whether anything was committed since a
connection last asked (``PRAGMA data_version``, see ``Database.version``), so
a poll that found nothing at a version finds nothing again at that version, and
returns at once.

Only a poll that found nothing is remembered: one that found something has
either written (taken requests and claimed units are marked, which changes the
version) or moves on (the next signals are asked for after a later seq, which
is another poll). A ledger that cannot tell (PostgreSQL: other hosts write, and
their wake-ups come by LISTEN/NOTIFY) answers None, and every poll reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from workunits._ledger.backend import Database

T = TypeVar("T")


class Polls:
    """Safe from any thread; one remembered version per kind of poll (its key's first item)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._empty_at: dict[Hashable, tuple[tuple[Hashable, ...], object]] = {}

    def poll(self, key: tuple[Hashable, ...], read: Callable[[], list[T]]) -> list[T]:
        """``read()``, unless the poll ``key`` found nothing at the ledger's current version."""
        version = self._db.version()  # before the read: a commit after it shows next time
        if version is None:
            return read()
        with self._lock:
            if self._empty_at.get(key[0]) == (key, version):
                return []
        found = read()
        if not found:
            with self._lock:
                self._empty_at[key[0]] = (key, version)
        return found
