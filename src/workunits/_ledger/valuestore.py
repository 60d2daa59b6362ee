"""Large values kept beside the ledger, which holds only a reference to each.

A spec, result or checkpoint larger than ``LARGE_VALUE`` bytes would make
every later update of its unit's row rewrite it into the WAL (SQLite rewrites
a whole row, overflow pages included): a 64 MiB argument once grew the ledger
by four times its size. Such a value is written once, here, and the row's
``<name>_file`` column names it.

A name is ``<unit id>.<purpose>.<hmac>``: the HMAC (``values.mac_of``, under
the state dir's key, over the purpose, unit, format and bytes) binds the file
to its unit as a signed column would, so a file swapped, edited or planted is
refused (LedgerTampered) before anything in it is used. A name is never
reused for other bytes: a new checkpoint is a new file, and the old one goes
after the row points at the new one, so a crash between the two leaves an
orphan (``orphans`` finds it), never a row whose file changed under it.

``ValueStore`` is the interface; ``FileValueStore`` keeps files in the state
dir (0700 directory, 0600 files). A shared backend implements the same four
methods.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from workunits._core import ids
from workunits._core.errors import LedgerCorrupt, LedgerError, LedgerFull, LedgerTampered

LARGE_VALUE = 1 << 20
"""Values above this many bytes go to the value store; the ledger keeps a reference."""

VALUES_DIR = "values"
PURPOSES = ("spec", "result", "checkpoint")
_NAME_RE = re.compile(r"([a-z][0-9a-z]{8})\.(spec|result|checkpoint)\.([0-9a-f]{64})", re.ASCII)


def name_of(work_id: str, purpose: str, mac: bytes) -> str:
    """The reference the ledger stores for a value of ``work_id``, bound by its ``mac``."""
    if purpose not in PURPOSES:
        raise ValueError(f"no value store purpose {purpose!r}")
    return f"{ids.validate(work_id)}.{purpose}.{mac.hex()}"


def parse_name(name: str) -> tuple[str, str, bytes]:
    """``(work_id, purpose, mac)`` of a reference; LedgerTampered for anything else."""
    match = _NAME_RE.fullmatch(name) if isinstance(name, str) else None
    if match is None or not ids.is_valid(match[1]):
        raise LedgerTampered(f"{name!r} is not a value store reference; the ledger was edited")
    return match[1], match[2], bytes.fromhex(match[3])


class ValueStore(Protocol):
    """Where large values live. Every method runs in the calling thread."""

    def put(self, name: str, data: bytes, *, durable: bool) -> None:
        """Store ``data`` under ``name`` (complete or not at all); fsync it when ``durable``."""

    def get(self, name: str) -> bytes:
        """The bytes stored under ``name``; LedgerCorrupt when they are gone."""

    def delete(self, name: str) -> int:
        """Remove ``name`` if present; the bytes freed."""

    def names(self) -> Iterator[tuple[str, float]]:
        """Every stored name with its modification time."""


class FileValueStore:
    """One file per value in ``<state dir>/values``."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / VALUES_DIR

    def path_of(self, name: str) -> Path:
        parse_name(name)  # a path is never built from an unchecked name
        return self.root / name

    def put(self, name: str, data: bytes, *, durable: bool) -> None:
        target = self.path_of(name)
        if target.exists():
            # A name is its bytes' HMAC: the file holds these bytes already (a record
            # written again carries its result again). A changed file fails at read.
            return
        self._make_root()
        tmp = self.root / f".{name}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600)
            try:
                with memoryview(data) as view:
                    done = 0
                    while done < len(view):
                        done += os.write(fd, view[done:])
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)  # same name, same bytes: a replay changes nothing
            if durable:
                _fsync_dir(self.root)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if exc.errno == errno.ENOSPC:
                raise LedgerFull(
                    f"the disk holding {self.root} is full; the value was not stored. "
                    f"Free space there and retry"
                ) from exc
            raise LedgerError(f"cannot store a value in {self.root}: {exc.strerror}") from exc

    def get(self, name: str) -> bytes:
        path = self.path_of(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise LedgerCorrupt(
                f"the value file {name} is missing from {self.root}; it was deleted outside "
                f"workunits, or the state dir was copied without it (use `workunits backup`)"
            ) from None
        except OSError as exc:
            raise LedgerTampered(f"cannot open the value file {path}: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise LedgerTampered(f"{path} is not a regular file")
            return f.read()

    def get_raw(self, name: str) -> bytes:
        """The bytes under ``name``; FileNotFoundError when they are gone (for backups)."""
        fd = os.open(self.path_of(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def delete(self, name: str) -> int:
        path = self.path_of(name)
        try:
            size = path.lstat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def names(self) -> Iterator[tuple[str, float]]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return
        for entry in entries:
            if _NAME_RE.fullmatch(entry.name):
                with contextlib.suppress(FileNotFoundError):
                    yield entry.name, entry.stat(follow_symlinks=False).st_mtime

    def _make_root(self) -> None:
        try:
            os.mkdir(self.root, 0o700)
        except FileExistsError:
            info = os.lstat(self.root)
            if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) & 0o077:
                raise LedgerError(
                    f"{self.root} is not a private directory (mode "
                    f"{stat.S_IMODE(info.st_mode):o}); remove it or chmod 700 it"
                ) from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
