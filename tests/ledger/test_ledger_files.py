"""The state dir is private: 0700, files 0600, the key 0400 and never replaced."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledger.support import new_unit
from workunits import SpecError, Status, Supervisor
from workunits._ledger import Ledger, LedgerError
from workunits._ledger.sqlite.db import SqliteDatabase
from workunits._ledger.values import KEY_FILE


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.sqlite_only
def test_state_dir_and_every_file_are_private(ledger: Ledger, state_dir: Path) -> None:
    new_unit(ledger)
    assert _mode(state_dir) == 0o700
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        assert _mode(state_dir / name) == 0o600, name
    assert _mode(state_dir / KEY_FILE) == 0o400
    assert len((state_dir / KEY_FILE).read_bytes()) == 32
    leftovers = [p.name for p in state_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_a_loose_state_dir_of_ours_is_tightened(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o755)
    state_dir.chmod(0o755)
    Ledger(state_dir).close()
    assert _mode(state_dir) == 0o700


def test_the_key_is_made_once_and_kept(state_dir: Path) -> None:
    Ledger(state_dir).close()
    key = (state_dir / KEY_FILE).read_bytes()
    Ledger(state_dir).close()
    assert (state_dir / KEY_FILE).read_bytes() == key


def test_a_key_others_can_read_is_refused(state_dir: Path) -> None:
    Ledger(state_dir).close()
    (state_dir / KEY_FILE).chmod(0o644)
    with pytest.raises(LedgerError, match="chmod 400"):
        Ledger(state_dir)


def test_a_symlink_planted_as_the_key_is_refused_saying_so(state_dir: Path) -> None:
    Ledger(state_dir).close()
    key = state_dir / KEY_FILE
    key.rename(state_dir / "real.key")
    os.symlink(state_dir / "real.key", key)
    with pytest.raises(LedgerError, match="is a symlink, and the key that signs"):
        Ledger(state_dir)


def test_a_symlink_planted_as_the_database_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.db"
    os.symlink(target, state_dir / "ledger.db")
    with pytest.raises(LedgerError, match="symlink"):
        Ledger(state_dir)
    assert not target.exists()


def test_a_ledger_is_not_used_across_a_fork(ledger: Ledger) -> None:
    new_unit(ledger)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the inherited connection must refuse to work
        os.close(read)
        try:
            ledger.units.list()
        except LedgerError as exc:
            os.write(write, str(exc).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    assert "open a new Ledger" in message
    assert len(ledger.units.list()) == 1


def test_a_second_ledger_in_one_process_keeps_the_first_one_seeing_other_processes(
    state_dir: Path,
) -> None:
    # Opening a second Ledger used to open and close the database files, which
    # drops every POSIX lock this process holds on them (the first Ledger's
    # too). Another process closing its connection then believed it was the
    # last, deleted the WAL, and this process never saw its commits again.
    first = Ledger(state_dir)
    second = Ledger(state_dir)
    code = (
        "import sys\n"
        "from workunits._ledger import Ledger\n"
        "with Ledger(sys.argv[1]) as ledger:\n"
        "    print(ledger.requests.add('kill', 'b00000000'))\n"
    )
    try:
        for _ in range(3):
            done = subprocess.run(
                [sys.executable, "-c", code, str(state_dir)],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
            seq = int(done.stdout)
            assert first.requests.get(seq) is not None
            assert second.requests.get(seq) is not None
    finally:
        first.close()
        second.close()


# -- how durable a commit is ------------------------------------------------------


def _synchronous_after_a_submit(ledger: Ledger) -> int:
    new_unit(ledger)
    assert isinstance(ledger._db, SqliteDatabase)  # these tests are about the SQLite file
    return int(ledger._db.conn.execute("PRAGMA synchronous").fetchone()[0])


def test_submits_are_fully_synced_by_default(tmp_path: Path) -> None:
    with Ledger(tmp_path / "state") as ledger:
        assert _synchronous_after_a_submit(ledger) == 2  # FULL


def test_sync_normal_skips_the_fsync_but_keeps_every_commit(tmp_path: Path) -> None:
    with Ledger(tmp_path / "state", sync="normal") as ledger:
        assert _synchronous_after_a_submit(ledger) == 1  # NORMAL
        unit = new_unit(ledger)
    # Another connection (another process would do the same) reads it back.
    with Ledger(tmp_path / "state") as reader:
        row = reader.units.get(unit.id)
        assert row is not None
        assert row.status is Status.PENDING


def test_an_unknown_sync_mode_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"sync must be one of \['full', 'normal'\], got 'off'"):
        Ledger(tmp_path / "state", sync="off")


def test_a_supervisor_refuses_an_unknown_ledger_sync_before_touching_the_state_dir(
    tmp_path: Path,
) -> None:
    with pytest.raises(SpecError, match="ledger_sync must be one of"):
        Supervisor(tmp_path / "state", ledger_sync="fast")
    assert not (tmp_path / "state").exists()
