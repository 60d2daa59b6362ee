"""Output files made ahead of launches (``actors.warm_files``): new, refused where
something is, and given to one unit each."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PLANTS, assert_plant_untouched, eventually, plant
from tests.helpers import WAIT
from workunits import Supervisor
from workunits._util import outputfile
from workunits.actors import warm_files
from workunits.actors.warm_files import KEEP, SPARE_DIR, WarmFiles

pytestmark = pytest.mark.timeout(30)

SHM = Path("/dev/shm")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "output"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def stock(tmp_path: Path) -> Iterator[WarmFiles]:
    files = WarmFiles(tmp_path / SPARE_DIR, keep=4, low=2, fill=False)
    yield files
    files.close()


def _spares(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_each_warm_file_is_new_empty_private_and_given_once(
    stock: WarmFiles, out: Path, tmp_path: Path
) -> None:
    assert stock.fill_once() == 4
    assert len(_spares(tmp_path / SPARE_DIR)) == 4

    inodes = set()
    for n in range(4):
        path = out / f"b0000000{n}.out"
        fd = stock.create(str(path))
        try:
            info = os.fstat(fd)
            assert os.stat(path).st_ino == info.st_ino  # the descriptor is the file at path
            assert info.st_size == 0
            assert stat.S_IMODE(info.st_mode) == 0o600
            assert info.st_nlink == 1  # its spare name is gone
            # The descriptor names the unit's file, as one opened at its path would.
            assert os.readlink(f"/proc/self/fd/{fd}") == str(path)
            os.write(fd, b"mine")
        finally:
            os.close(fd)
        assert path.read_bytes() == b"mine"
        inodes.add(info.st_ino)

    assert len(inodes) == 4  # four units, four files
    assert stock.ready() == 0
    assert _spares(tmp_path / SPARE_DIR) == []


@pytest.mark.parametrize("planted", PLANTS)
def test_anything_at_the_path_is_refused_and_the_file_stays_ready(
    stock: WarmFiles, out: Path, tmp_path: Path, planted: str
) -> None:
    stock.fill_once()
    path = out / "b00000001.out"
    plant(path, planted, tmp_path)

    with pytest.raises(outputfile.OutputFileError, match="something already exists") as caught:
        stock.create(str(path))

    assert caught.value.errno == errno.EEXIST
    assert_plant_untouched(path, planted, tmp_path)
    assert stock.ready() == 4  # the refused unit's file is still new: the next one gets it
    assert len(_spares(tmp_path / SPARE_DIR)) == 4


def test_append_is_set_when_asked(stock: WarmFiles, out: Path) -> None:
    stock.fill_once()
    appending = stock.create(str(out / "a00000001.jsonl"), append=True)
    plain = stock.create(str(out / "b00000001.out"))
    try:
        assert fcntl.fcntl(appending, fcntl.F_GETFL) & os.O_APPEND
        assert not fcntl.fcntl(plain, fcntl.F_GETFL) & os.O_APPEND
        assert fcntl.fcntl(appending, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(appending)
        os.close(plain)


def test_spares_are_made_as_the_last_ask_wanted_and_mended_for_the_other(
    stock: WarmFiles, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of agents' transcripts gets appending spares, with no flag to set at
    launch; a shell's ask among them still gets a descriptor that does not append."""
    calls: list[int] = []
    real = fcntl.fcntl

    def counted(fd: int, cmd: int, arg: int = 0) -> int:
        calls.append(cmd)
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", counted)  # the module warm_files calls
    fds = []
    try:
        stock.fill_once()  # nothing asked yet: plain spares
        fds.append(stock.create(str(out / "a00000001.jsonl"), append=True))
        assert calls  # a plain spare, mended
        for n in range(2, 5):
            fds.append(stock.create(str(out / f"a0000000{n}.jsonl"), append=True))
        assert stock.fill_once() == 4  # made for the last ask: appending
        calls.clear()
        for n in range(5, 8):
            fds.append(stock.create(str(out / f"a0000000{n}.jsonl"), append=True))
        assert calls == []  # taken as made
        fds.append(stock.create(str(out / "b00000001.out")))
        assert calls  # an appending spare, mended for a shell
        assert all(real(fd, fcntl.F_GETFL) & os.O_APPEND for fd in fds[:-1])
        assert not real(fds[-1], fcntl.F_GETFL) & os.O_APPEND
    finally:
        for fd in fds:
            os.close(fd)


def test_with_no_file_ready_one_is_created_at_once(
    stock: WarmFiles, out: Path, tmp_path: Path
) -> None:
    path = out / "b00000001.out"
    fd = stock.create(str(path))
    os.close(fd)
    assert path.exists()
    assert _spares(tmp_path / SPARE_DIR) == []


def test_where_names_cannot_move_files_are_created_in_place(out: Path) -> None:
    """A real EXDEV: spares on /dev/shm, the unit's directory on the test's disk."""
    if not SHM.is_dir() or os.stat(SHM).st_dev == os.stat(out).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    spare = SHM / f"workunits-warm-test-{os.getpid()}"
    stock = WarmFiles(spare, keep=2, low=1, fill=False)
    try:
        stock.fill_once()
        path = out / "b00000001.out"
        os.close(stock.create(str(path)))
        assert path.is_file()
        assert os.stat(path).st_dev == os.stat(out).st_dev
        assert stock.ready() == 0  # it stopped making files it cannot give
        assert stock.fill_once() == 0
        assert _spares(spare) == []
    finally:
        stock.close()
        spare.rmdir()


def test_a_dead_sessions_files_are_removed_at_start(tmp_path: Path) -> None:
    spare = tmp_path / SPARE_DIR
    spare.mkdir(mode=0o700)
    (spare / "123-0").write_bytes(b"")
    (spare / "123-1").write_bytes(b"")
    stock = WarmFiles(spare, keep=2, low=1, fill=False)
    try:
        assert _spares(spare) == []
    finally:
        stock.close()


def test_close_removes_the_files_ready(tmp_path: Path, out: Path) -> None:
    stock = WarmFiles(tmp_path / SPARE_DIR, keep=3, low=1, fill=False)
    stock.fill_once()
    stock.close()
    assert _spares(tmp_path / SPARE_DIR) == []
    assert stock.fill_once() == 0
    os.close(stock.create(str(out / "b00000001.out")))  # created in place after close


def test_the_thread_refills_the_stock_once_it_runs_low(tmp_path: Path, out: Path) -> None:
    spare = tmp_path / SPARE_DIR
    stock = WarmFiles(spare, keep=4, low=2)
    try:
        eventually(lambda: stock.ready() == 4, 10, "the first fill")
        for n in range(3):  # 1 left: below low
            os.close(stock.create(str(out / f"b0000000{n}.out")))
        eventually(lambda: stock.ready() == 4, 10, "a refill")
        assert len(_spares(spare)) == 4
    finally:
        stock.close()
    assert _spares(spare) == []


def test_units_get_files_while_the_stock_cannot_fill(tmp_path: Path, out: Path) -> None:
    spare = tmp_path / SPARE_DIR
    stock = WarmFiles(spare, keep=2, low=1, fill=False)
    try:
        spare.rmdir()  # every file the stock makes now fails
        with pytest.raises(FileNotFoundError):
            stock.fill_once()
        path = out / "b00000001.out"
        os.close(stock.create(str(path)))
        assert path.is_file()
    finally:
        stock.close()


@pytest.mark.parametrize("bad", [(0, 0), (2, 3), (4, -1)])
def test_the_stock_sizes_are_checked(tmp_path: Path, bad: tuple[int, int]) -> None:
    keep, low = bad
    with pytest.raises(ValueError, match="need 0 < low <= keep"):
        WarmFiles(tmp_path / SPARE_DIR, keep=keep, low=low, fill=False)


def _double(x: int) -> int:
    return 2 * x


def test_a_supervisors_units_take_their_files_from_its_stock(state_dir: Path) -> None:
    spare = state_dir / SPARE_DIR
    with Supervisor(state_dir, install_signal_handlers=False) as sup:
        files: WarmFiles = sup._machinery.files
        eventually(lambda: files.ready() == KEEP, WAIT, "the first fill")
        made = set(_spares(spare))

        shell = sup.shell(["echo", "warm"])
        sup.wait(shell.id, timeout=WAIT)
        agent = sup.agent(_double, 21)
        assert sup.result(agent.id, timeout=WAIT) == 42
        pooled = sup.agent(_double, 4, reuse=True)
        assert sup.result(pooled.id, timeout=WAIT) == 8

        assert sup.read_output(shell.id) == b"warm\n"
        # Three of the files made ahead are gone from the stock: the three units took them.
        assert len(made - set(_spares(spare))) == 3
        assert Path(outputfile.transcript_path(state_dir, agent.id)).is_file()
    assert _spares(spare) == []  # close removed what was still ready


def test_without_renameat2_files_are_created_in_place(
    stock: WarmFiles, out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where libc has no renameat2 (not Linux, an old glibc): what ``create`` did before."""
    monkeypatch.setattr(warm_files, "_RENAME", None)
    stock.fill_once()
    path = out / "b00000001.out"
    os.close(stock.create(str(path)))
    assert path.is_file()
    assert stock.ready() == 0
    assert _spares(tmp_path / SPARE_DIR) == []


def test_a_stock_whose_directory_vanished_creates_files_and_warns_once(
    tmp_path: Path, out: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spare = tmp_path / SPARE_DIR
    stock = WarmFiles(spare, keep=2, low=1)
    caplog.set_level(logging.DEBUG, logger=warm_files.__name__)

    def said(level: int) -> int:
        return sum(
            1
            for r in caplog.records
            if r.name == warm_files.__name__ and r.levelno == level and "ahead" in r.message
        )

    try:
        eventually(lambda: stock.ready() == 2, 10, "the first fill")
        spare.rename(tmp_path / "moved away")  # the ready files' names are gone with it
        for n in range(2):
            path = out / f"b0000000{n}.out"
            os.close(stock.create(str(path)))
            assert path.is_file()
            assert os.stat(path).st_size == 0
        eventually(lambda: said(logging.WARNING), 10, "the failed refill's warning")
        for n in range(2, 5):  # each ask lets the thread try again
            os.close(stock.create(str(out / f"b0000000{n}.out")))
        eventually(lambda: said(logging.DEBUG) >= 1, 10, "a second failed refill")
        assert said(logging.WARNING) == 1
    finally:
        stock.close()
