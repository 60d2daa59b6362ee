"""A full disk is a clear LedgerFull, with nothing written, and the ledger works again
once there is room."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.support import new_unit, submit
from workunits._ledger import Ledger, LedgerFull


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (room for a fresh ledger), mounted for this test and always unmounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    mount = shutil.which("mount")
    umount = shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("mount/umount are not installed")
    point = tmp_path / "tiny"
    point.mkdir()
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(point)],
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


def _fill(path: Path) -> None:
    """Write until the disk is full: pages first, then single bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in (b"\0" * 4096, b"\0"):
            _write_until_full(fd, chunk)
    finally:
        os.close(fd)


def _write_until_full(fd: int, chunk: bytes) -> None:
    while True:
        try:
            os.write(fd, chunk)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return
            raise


def _submit_until_full(ledger: Ledger) -> tuple[str, LedgerFull]:
    for n in range(50):  # a few pages may still fit in the WAL
        try:
            submit(ledger, key=f"big-{n}", args=("x" * 20_000, n))
        except LedgerFull as exc:
            return f"big-{n}", exc
    pytest.fail("50 submits of 20 kB each fitted on a full disk")


@pytest.mark.timeout(60)
def test_a_full_disk_is_ledger_full_and_nothing_is_written(tiny_fs: Path) -> None:
    state_dir = tiny_fs / "state"
    with Ledger(state_dir) as ledger:
        kept = new_unit(ledger, key="kept")
        _fill(tiny_fs / "filler")
        failed_key, error = _submit_until_full(ledger)
        message = str(error)
        assert str(state_dir) in message
        assert "full" in message
        assert "nothing was written" in message
        keys = {row.key for row in ledger.units.list()}
        assert "kept" in keys
        assert failed_key not in keys  # the failed submit left no row behind
        assert ledger.units.require(kept.id) == kept

        (tiny_fs / "filler").unlink()
        again, created = submit(ledger, key=failed_key, args=("x" * 20_000, int(failed_key[4:])))
        assert created
        assert ledger.units.require(again.id).key == failed_key


@pytest.mark.timeout(60)
def test_opening_a_new_ledger_on_a_full_disk_is_ledger_full(tiny_fs: Path) -> None:
    _fill(tiny_fs / "filler")
    with pytest.raises(LedgerFull, match="full"):
        Ledger(tiny_fs / "state")
