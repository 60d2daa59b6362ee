"""A consistent copy of a live state dir: the ledger, its key, and the files it refers to.

``cp`` of a live WAL database is not a backup: the main file and its ``-wal``
are copied at different moments, and the pair may not open. Here SQLite's
online backup API copies the database as of one transaction (readers do not
block the supervisor, which goes on writing). The copy then names the files
that state needs -- value store files by reference, agents' transcripts and
shells' kept logs by unit -- and they are copied after it. Value files never change once written;
one may be deleted after the snapshot (a checkpoint replaced, a unit
expired): then the whole copy is taken again.

The copy is a state dir of its own (0700, files 0600, key 0400), at any
path: a unit's output path follows from the state dir it is opened in
(``Units.output_path_of``), and nothing in the ledger names an absolute path
that the restored copy needs. A supervisor opened on it recovers as after a
crash: units that were running resume from their checkpoints or fail lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from workunits._core import ids as _ids
from workunits._core.errors import LedgerError, SpecError
from workunits._ledger import valuestore
from workunits._ledger.largevalues import FILE_COLUMNS
from workunits._ledger.sqlite.db import DB_FILE, SqliteDatabase, create_private_file
from workunits._ledger.values import KEY_FILE
from workunits._util import outputfile

ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class BackupReport:
    dest: Path
    units: int
    value_files: int
    transcripts: int
    bytes: int


def backup(db: SqliteDatabase, state_dir: Path, dest: Path) -> BackupReport:
    """Copy the live state dir to ``dest`` (which must not exist, or be an empty directory)."""
    _prepare(dest)
    for attempt in range(1, ATTEMPTS + 1):
        _snapshot(db, dest / DB_FILE)
        units, values, transcripts = _referred(dest / DB_FILE)
        try:
            copied = _copy_values(state_dir, dest, values)
        except FileNotFoundError:
            if attempt == ATTEMPTS:
                raise LedgerError(
                    f"the ledger of {state_dir} kept changing its large values while "
                    f"{ATTEMPTS} copies were taken; retry the backup"
                ) from None
            continue
        copied += _copy_transcripts(state_dir, dest, transcripts)
        key = state_dir / KEY_FILE
        if key.exists():
            shutil.copyfile(key, dest / KEY_FILE)
            os.chmod(dest / KEY_FILE, 0o400)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        return BackupReport(dest, units, len(values), copied - len(values), size)
    raise AssertionError("unreachable")  # pragma: no cover


def _prepare(dest: Path) -> None:
    """Make ``dest``, or take it when it is an empty directory; SpecError for a bad one
    (an argument the caller gives: nothing is wrong with the ledger)."""
    try:
        os.mkdir(dest, 0o700)
    except FileExistsError:
        if not dest.is_dir() or any(dest.iterdir()):
            raise SpecError(
                f"{dest} exists and is not an empty directory; give a new path for the backup"
            ) from None
        os.chmod(dest, 0o700)
    except FileNotFoundError:
        raise SpecError(
            f"{dest.parent} does not exist; create it, or give a path in a directory that does"
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot make {dest} for the backup: {exc.strerror}") from None


def _snapshot(db: SqliteDatabase, target: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        target.unlink()  # a retry starts from nothing
    create_private_file(target)
    copy = sqlite3.connect(target)
    try:
        db.backup_to(copy)
        # A self-contained file: no -wal beside it to forget.
        copy.execute("PRAGMA journal_mode = DELETE").fetchall()
    finally:
        copy.close()


def _referred(path: Path) -> tuple[int, list[str], list[str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        values = [
            str(r[0])
            for column in FILE_COLUMNS
            for r in conn.execute(
                f"SELECT {column} FROM units WHERE {column} IS NOT NULL"  # noqa: S608
            )
        ]
        ids = [str(r[0]) for r in conn.execute("SELECT id FROM units WHERE expired_at IS NULL")]
        units = int(conn.execute("SELECT count(*) FROM units").fetchone()[0])
    finally:
        conn.close()
    return units, values, [i for i in ids if _ids.is_valid(i)]


def _copy_values(state_dir: Path, dest: Path, names: list[str]) -> int:
    source = valuestore.FileValueStore(state_dir)
    target = valuestore.FileValueStore(dest)
    for name in names:
        data = source.get_raw(name)  # FileNotFoundError: deleted since the snapshot
        target.put(name, data, durable=True)
    return len(names)


def _copy_transcripts(state_dir: Path, dest: Path, ids: list[str]) -> int:
    """Agents' transcripts and shells' kept logs; a pointer to a caller's log (a
    symlink) is not ours to copy."""
    copied = 0
    for work_id in ids:
        sources = outputfile.kept_paths(state_dir, work_id)
        for source, target in zip(sources, outputfile.kept_paths(dest, work_id), strict=True):
            if not os.path.isfile(source) or os.path.islink(source):
                continue
            Path(target).parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out)  # append-only: a prefix of it is a transcript
            copied += 1
    return copied
