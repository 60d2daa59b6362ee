"""``workunits doctor`` names the containment mechanism in use and what it misses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from workunits._cli import cli, doctor
from workunits._zygote import containment


def lines(tmp_path: Path) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["doctor", "--state", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    return {line.split()[0]: line for line in result.output.splitlines()}


def test_doctor_reports_every_check(tmp_path: Path) -> None:
    found = lines(tmp_path)
    isolation = {"namespace", "landlock", "no-new-privs", "seccomp", "limits"}
    if os.geteuid() == 0:
        isolation.add("capabilities")
    assert set(found) == {"containment", "pidfd", "subreaper", "filesystem", "fsync", *isolation}
    mechanism = "cgroup" if containment.probe().own is not None else "subreaper"
    assert f" {mechanism}: " in found["containment"]
    timed = "a move into a cgroup after 100 ms idle took " in found["containment"]
    assert timed == (mechanism == "cgroup")


def test_a_timed_move_puts_this_process_back_and_leaves_nothing() -> None:
    """What ``doctor`` times: a move into a scratch cgroup after a pause, then back."""
    own = containment.probe().own
    if own is None:
        pytest.skip(f"no cgroup per unit here: {containment.probe().reason}")
    before = Path("/proc/self/cgroup").read_text()
    took = containment.time_a_move(own, 0.01)
    assert 0 < took < 5.0
    assert Path("/proc/self/cgroup").read_text() == before
    assert not Path(own, f"workunits-move-{os.getpid()}").exists()


def test_a_slow_move_names_its_cause_and_cure_unless_already_cured() -> None:
    slow, fast = 0.008, 0.0002
    advice = doctor.moves(slow, favored=False)
    assert "took 8.00 ms" in advice
    assert "RCU grace period" in advice
    assert "favordynmods" in advice
    assert "favordynmods" not in doctor.moves(slow, favored=True)  # the mount has it: no wait
    assert "favordynmods" in doctor.moves(slow, favored=None)  # cannot tell: say it
    assert doctor.moves(fast, favored=False) == (
        "; a move into a cgroup after 100 ms idle took 0.20 ms"
    )


def test_doctor_says_what_the_subreaper_chain_cannot_catch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(containment.ENV, "subreaper")
    line = lines(tmp_path)["containment"]
    assert "degraded" in line
    assert "subreaper: switched off" in line
    assert "another daemon" in line


def test_a_journal_is_found_by_its_block_device(tmp_path: Path) -> None:
    """The kernel lists each running journal as ``<device>-<inode>`` under /proc/fs/jbd2."""
    jbd2 = tmp_path / "jbd2"
    jbd2.mkdir()
    for name in ("vda-8", "dm-0-8", "loop12-8"):
        (jbd2 / name).mkdir()
    assert doctor.journaled("vda", jbd2) is True
    assert doctor.journaled("dm-0", jbd2) is True
    assert doctor.journaled("loop1", jbd2) is False  # loop12's journal is not loop1's
    assert doctor.journaled("vdb", jbd2) is False
    assert doctor.journaled("vda", tmp_path / "no-journal-layer") is False


def test_doctor_says_when_ext4_has_no_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start costs drift with churn there: the doctor's filesystem line says why."""
    if doctor._fs_of(tmp_path.resolve())[0] != "ext4":
        monkeypatch.setattr(doctor, "_fs_of", lambda _path: ("ext4", "/"))
    monkeypatch.setattr(doctor, "ext4_journal", lambda _path: False)
    line = lines(tmp_path)["filesystem"]
    assert "ok" in line
    assert "ext4 without a journal" in line
    assert "deleted in the minutes before" in line
    monkeypatch.setattr(doctor, "ext4_journal", lambda _path: True)
    assert "journal" not in lines(tmp_path)["filesystem"]
    monkeypatch.setattr(doctor, "ext4_journal", lambda _path: None)  # unknown: nothing said
    assert "journal" not in lines(tmp_path)["filesystem"]
