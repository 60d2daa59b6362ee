"""The supervisor notices when its ledger is gone (invariant 16).

``ledger.db``, its ``-wal`` or the key deleted, replaced or moved while a
supervisor runs (by anyone): it refuses new work with ``LedgerGone``, keeps
what it holds in memory readable, holds the ends of running units in memory
as not durable, and says so; it never writes into a file nobody will open
again.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

import workunits as wu

from .conftest import eventually

pytestmark = pytest.mark.timeout(60)


def delete(state: Path) -> None:
    for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
        (state / name).unlink(missing_ok=True)


def replace_with_a_copy(state: Path) -> None:
    shutil.copy(state / "ledger.db", state / "copy.db")
    os.replace(state / "copy.db", state / "ledger.db")


def move(state: Path) -> None:
    os.rename(state / "ledger.db", state.parent / "moved.db")


def delete_wal(state: Path) -> None:
    (state / "ledger.db-wal").unlink()


def delete_key(state: Path) -> None:
    (state / "secret.key").unlink()


def replace_key(state: Path) -> None:
    key = state / "secret.key"
    data = key.read_bytes()
    key.unlink()
    key.write_bytes(data)


GONE = {
    "deleted": delete,
    "replaced": replace_with_a_copy,
    "moved": move,
    "wal-deleted": delete_wal,
    "key-deleted": delete_key,
    "key-replaced": replace_key,
}


@pytest.mark.parametrize("how", sorted(GONE))
def test_a_ledger_gone_refuses_new_work_and_keeps_memory(
    state_dir: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = state_dir.parent / "release"
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        done = sup.shell(["echo", "done before"])
        assert sup.wait(done.id, timeout=30).status is wu.Status.COMPLETED
        running = sup.shell(f"while [ ! -e {release} ]; do sleep 0.01; done")
        eventually(lambda: sup.get(running.id).pid, what="the unit to run")
        GONE[how](state_dir)
        with caplog.at_level(logging.ERROR), pytest.raises(wu.LedgerGone, match="no new work"):
            sup.shell(["true"])
        with pytest.raises(wu.LedgerGone):
            sup.agent(len, "x")
        assert isinstance(wu.LedgerGone("x"), wu.LedgerTampered)
        # What it holds stays readable.
        assert sup.get(done.id).output_tail == b"done before\n"
        assert running.id in {r.id for r in sup.list()}
        release.touch()
        eventually(
            lambda: sup.get(running.id).status is wu.Status.COMPLETED,
            what="the running unit's end",
        )
        assert (
            sup.get(running.id).durable is False
        )  # held in memory: nothing landed in the lost file
        eventually(lambda: "LEDGER GONE" in caplog.text, what="the supervisor to say so")


def test_nothing_is_written_into_a_ledger_file_nobody_will_open(state_dir: Path) -> None:
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        sup.wait(sup.shell(["true"]).id, timeout=30)
        held = os.open(state_dir / "ledger.db", os.O_RDONLY)  # the unlinked file, to watch
        try:
            size = os.fstat(held).st_size
            delete(state_dir)
            with pytest.raises(wu.LedgerGone):
                sup.shell(["true"])
            assert os.fstat(held).st_size == size
        finally:
            os.close(held)
    assert not (state_dir / "ledger.db").exists()  # closing made no new one either


def test_a_supervisor_with_its_ledger_in_place_goes_on(state_dir: Path) -> None:
    """The check itself is quiet: an untouched ledger, a WAL checkpoint, a backup."""
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        for _ in range(3):
            sup.wait(sup.shell(["true"]).id, timeout=30)
        sup.gc()
        assert sup.wait(sup.shell(["true"]).id, timeout=30).durable
