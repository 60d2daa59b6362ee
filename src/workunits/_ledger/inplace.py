"""Whether the ledger's files are still where the supervisor thinks they are (invariant 17).

Anyone may delete, replace or move ``ledger.db``, its ``-wal`` or the key
while a supervisor runs. SQLite would go on writing into the file it has
open, which nobody will open again: the next supervisor on the state dir
would start empty, every unit and notice gone. So each file is held open
here (a descriptor of our own, read-only) and checked against its path: the
open file deleted (no link left), its path gone, or the path naming another
file is a ledger that is gone. The check runs before each write transaction
of the SQLite ledger and on each of the supervisor's ticks; once a file is
gone it stays gone for this process.

Looking is two system calls per file (``fstat`` and ``stat``), each one a
release of the GIL that the supervisor's thread waits to get back. So on
Linux an inotify watch of the names (``_util.namewatch``) says first whether
any entry on the way to them changed, in one read: only then, and at least
every ``LOOK_EVERY`` seconds (a file system mounted over a directory makes no
event), does the check look at the files themselves.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from workunits._core.errors import LedgerGone
from workunits._util.namewatch import NameWatch

LOOK_EVERY = 1.0  # seconds: the longest a watched check goes without looking


class FilesInPlace:
    """Files that must stay where they are; any thread (a lock guards the descriptors)."""

    def __init__(self, paths: dict[Path, str]) -> None:
        """``paths``: each file, and what the message calls it (``the ledger``, ``the key``)."""
        self._what = dict(paths)
        # Guards _open and _gone: O(1) work and a few stat calls, never a wait.
        self._lock = threading.Lock()
        self._open: dict[Path, int | None] = dict.fromkeys(paths)
        self._gone: LedgerGone | None = None
        self._track()
        # Made after the files were opened: a change from then on is an event.
        self._watch = NameWatch.watch(paths)
        self._track()  # and what was made meanwhile (a -wal), which made no event seen
        self._looked_at = time.monotonic()

    def _track(self) -> None:
        """Open the files that exist now and were not open yet (a -wal comes later)."""
        for path, fd in self._open.items():
            if fd is None:
                with contextlib.suppress(OSError):
                    self._open[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)

    def check(self) -> None:
        """Raise LedgerGone when a file was deleted, replaced or moved (and ever after)."""
        with self._lock:
            if self._gone is None and self._must_look():
                why = self._look()
                if why is not None:
                    self._gone = LedgerGone(
                        f"{why} while this supervisor ran: it takes no new work, and writes "
                        f"nothing more there (a file nobody would open again). What it "
                        f"holds in memory stays readable; the ends of its running units are "
                        f"kept in memory, not durable. Close it, and start a supervisor on "
                        f"a state dir whose ledger is in place (restore it from a backup)"
                    )
            gone = self._gone
        if gone is not None:
            raise LedgerGone(str(gone))

    def _must_look(self) -> bool:
        """Whether a file may have moved since the last look (always, without a watch)."""
        now = time.monotonic()
        watch = self._watch
        if watch is not None and not watch.changed() and now - self._looked_at < LOOK_EVERY:
            return False
        self._looked_at = now
        return True

    def _look(self) -> str | None:
        self._track()
        for path, fd in self._open.items():
            if fd is None:
                continue
            held = os.fstat(fd)
            what = self._what[path]
            if held.st_nlink == 0:
                return f"{what} file {path} was deleted"
            try:
                now = os.stat(path)
            except FileNotFoundError:
                return f"{what} file {path} was moved or deleted"
            except OSError:
                continue  # unreadable for a moment (EACCES, EIO): not proof of anything
            if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                return f"{what} file {path} was replaced by another file"
        return None

    def close(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.close()
            for path, fd in self._open.items():
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self._open[path] = None
