"""Cgroups a zygote gone unclean left behind are removed by the next one to start.

A guard that is SIGKILLed (a supervisor closing during its zygote's start kills
it so) cannot empty its zygote's cgroup; left alone, such directories pile up
under the supervisor's cgroup, run after run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.helpers import WAIT
from workunits import Supervisor
from workunits._zygote import containment

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def own(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(containment.ENV, raising=False)
    found = containment.probe()
    if found.own is None:
        pytest.skip(f"no cgroup per unit here: {found.reason}")
    return Path(found.own)


@pytest.fixture
def made(own: Path) -> Iterator[list[Path]]:
    """Directories a test makes under our cgroup; whatever is left is removed after it."""
    paths: list[Path] = []
    yield paths
    for path in reversed(paths):
        for child in sorted(path.glob("*/"), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _mkdir(made: list[Path], path: Path) -> Path:
    path.mkdir()
    made.append(path)
    return path


def test_the_emptied_cgroups_of_gone_makers_are_removed(own: Path, made: list[Path]) -> None:
    dead = _dead_pid()
    stale = _mkdir(made, own / f"workunits-{dead}")
    _mkdir(made, stale / "b00000001")  # a unit's directory inside
    _mkdir(made, stale / "warm-1")
    probe_left = _mkdir(made, own / f"workunits-probe-{dead}")
    living = _mkdir(made, own / f"workunits-{os.getpid()}")  # its maker (us) lives
    other = _mkdir(made, own / f"not-ours-{dead}")

    removed = containment.remove_stale(str(own))

    # Others left by earlier runs on this machine may go too: not these two.
    assert {stale.name, probe_left.name} <= set(removed)
    assert living.name not in removed
    assert other.name not in removed
    assert not stale.exists()
    assert not probe_left.exists()
    assert living.is_dir()
    assert other.is_dir()


def test_a_cgroup_that_still_holds_a_process_is_left_alone(own: Path, made: list[Path]) -> None:
    stale = _mkdir(made, own / f"workunits-{_dead_pid()}")
    unit = _mkdir(made, stale / "b00000001")
    empty = _mkdir(made, stale / "b00000002")  # not even its empty parts are touched
    # A process that stays until the test closes its stdin.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        (unit / "cgroup.procs").write_text(str(holder.pid))
        assert containment.remove_stale(str(own)) == []
        assert unit.is_dir()
        assert empty.is_dir()
    finally:
        holder.kill()
        holder.communicate()
    # Emptied once its process is gone (the kernel says so a moment after the reap).
    eventually(lambda: stale.name in containment.remove_stale(str(own)), WAIT, "the removal")
    assert not stale.exists()


def test_a_starting_zygote_removes_what_a_gone_one_left(
    own: Path, made: list[Path], tmp_path: Path
) -> None:
    stale = _mkdir(made, own / f"workunits-{_dead_pid()}")
    _mkdir(made, stale / "a00000001")
    with Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        sup.wait(sup.shell(["true"]).id, timeout=WAIT)  # its zygote has started
        assert not stale.exists()
