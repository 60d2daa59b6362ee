"""Two ways to make a ledger's writes fail with a real SQLITE_FULL.

- ``TmpfsFull``: the state dir lives on a small tmpfs the test mounts (root
  only); filling it with a file makes every write that needs a new block fail
  with ENOSPC, which SQLite reports as SQLITE_FULL.
- ``PageLimitFull``: where nothing can be mounted, ``PRAGMA max_page_count`` on
  the ledger's own connection (a supervisor's: ``ledger_of``), set to the
  pages it has, makes every write that needs a new page fail with SQLITE_FULL;
  other connections (a client's) still write. It reaches into the ledger's
  connection (under that connection's lock): the one liberty these tests take.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

import workunits as wu
from tests.conftest import eventually
from workunits._ledger import Ledger
from workunits._ledger.sqlite.db import SqliteDatabase


def ledger_of(sup: wu.Supervisor) -> Ledger:
    """The supervisor's own ledger (its actor's connection)."""
    return sup._machinery.ledger


class Filler(Protocol):
    """What a test does to the disk under a ledger."""

    # Bytes each unit should print: a write must need new pages for the page
    # limit to bite, and a tmpfs must not get blocks back when output is removed.
    output_bytes: int

    def fill(self, ledger: Ledger) -> None: ...

    def free(self, ledger: Ledger) -> None: ...


@contextlib.contextmanager
def tmpfs(point: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` at ``point`` (skip when impossible); always unmounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (PageLimitFull covers the rest)")
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("mount/umount are not installed")
    point.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run([umount, "-l", str(point)], check=True)


class TmpfsFull:
    output_bytes = 0  # a removed output file would hand blocks back to SQLite

    def __init__(self, point: Path) -> None:
        self._filler = point / "filler"

    def fill(self, ledger: Ledger) -> None:
        # An empty WAL first: SQLite reuses a WAL's blocks once it restarts it, and
        # a write that needs no new block would land on a full disk.
        with contextlib.closing(sqlite3.connect(ledger.path, timeout=10)) as conn:
            eventually(
                lambda: (
                    tuple(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()) == (0, 0, 0)
                ),
                what="an emptied WAL",
            )
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for chunk in (b"\0" * 65536, b"\0"):
                _write_until_full(fd, chunk)
        finally:
            os.close(fd)

    def free(self, ledger: Ledger) -> None:
        self._filler.unlink()


class PageLimitFull:
    output_bytes = 16384  # the end's tail and its notice need new pages

    def fill(self, ledger: Ledger) -> None:
        self._limit(ledger, None)

    def free(self, ledger: Ledger) -> None:
        self._limit(ledger, 1_073_741_823)

    @staticmethod
    def _limit(ledger: Ledger, pages: int | None) -> None:
        db = ledger._db  # the connection itself, under any session fence
        assert isinstance(db, SqliteDatabase), "the page limit is SQLite's"
        with db._lock:
            if pages is None:
                db.conn.executescript("PRAGMA incremental_vacuum;")  # no free page to reuse
                pages = int(db.conn.execute("PRAGMA page_count").fetchone()[0])
            db.conn.execute(f"PRAGMA max_page_count = {pages}")


def _write_until_full(fd: int, chunk: bytes) -> None:
    while True:
        try:
            os.write(fd, chunk)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return
            raise
