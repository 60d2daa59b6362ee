"""Symlink attack: a link planted where a unit's output or transcript will go is refused.

§7: output files are created with ``O_NOFOLLOW | O_EXCL``; the agent's output
link is made only where nothing is. The unit's ID is forced with a test hook
(``workunits._core.ids.mint`` patched for the duration) so the attacker knows the
path in advance, as one who guessed the ID would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from workunits import Status, Supervisor
from workunits._core import ids as _ids

from .jobs import touch


def _force_next_id(monkeypatch: pytest.MonkeyPatch, letter: str, work_id: str) -> None:
    """The next ID minted for ``letter`` is ``work_id``; every other mint is random."""
    real_mint: Callable[[str], str] = _ids.mint
    pending = [work_id]

    def mint(prefix: str) -> str:
        if prefix == letter and pending:
            return pending.pop()
        return real_mint(prefix)

    monkeypatch.setattr(_ids, "mint", mint)


def _plant(link: Path, target: Path) -> None:
    link.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.symlink(target, link)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the state dir that the attacker wants overwritten."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(b"precious\n")
    os.utime(path, (1_000_000_000, 1_000_000_000))
    return path


def _untouched(victim: Path) -> None:
    assert victim.read_bytes() == b"precious\n"
    assert victim.stat().st_mtime == 1_000_000_000


@pytest.mark.parametrize("dangling", [False, True], ids=["existing-target", "dangling"])
def test_a_shell_output_symlink_is_refused(
    sup: Supervisor,
    monkeypatch: pytest.MonkeyPatch,
    victim: Path,
    tmp_path: Path,
    dangling: bool,
) -> None:
    work_id = _ids.mint("b")
    target = tmp_path / "outside" / "new.txt" if dangling else victim
    _plant(sup.state_dir / "output" / f"{work_id}.out", target)
    _force_next_id(monkeypatch, "b", work_id)

    unit = sup.shell(["sh", "-c", "echo pwned; echo pwned > /dev/stderr"])
    assert unit.id == work_id
    record = sup.wait(unit.id, timeout=20)

    assert record.status == Status.FAILED, record
    assert "symlink" in (record.error or ""), record.error
    assert record.pid is None  # never started
    _untouched(victim)
    if dangling:
        assert not target.exists()  # nothing created through the link either
    assert sup.wait(sup.shell(["true"]).id, timeout=20).status == Status.COMPLETED


@pytest.mark.parametrize("where", ["transcript", "output"])
def test_an_agent_transcript_or_output_symlink_is_refused_and_the_body_never_runs(
    sup: Supervisor,
    monkeypatch: pytest.MonkeyPatch,
    victim: Path,
    tmp_path: Path,
    where: str,
) -> None:
    work_id = _ids.mint("a")
    link = (
        sup.state_dir / "transcripts" / f"{work_id}.jsonl"
        if where == "transcript"
        else sup.state_dir / "output" / f"{work_id}.out"
    )
    _plant(link, victim)
    _force_next_id(monkeypatch, "a", work_id)
    marker = tmp_path / "marker"

    unit = sup.agent(touch, str(marker))
    assert unit.id == work_id
    record = sup.wait(unit.id, timeout=20)

    assert record.status == Status.FAILED, record
    assert "refusing" in (record.error or ""), record.error
    assert not marker.exists()
    _untouched(victim)
    assert sup.result(sup.agent(touch, str(marker)).id, timeout=20) == str(marker)
