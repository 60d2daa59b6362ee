"""The ledger's files checked in place (invariant 17) through an inotify watch of their names.

Each change below is made and checked at once, well inside ``LOOK_EVERY``: a
check that relied on its periodic look instead of the watch would miss it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from workunits._core.errors import LedgerGone
from workunits._ledger import inplace
from workunits._ledger.inplace import FilesInPlace
from workunits._util.namewatch import NameWatch

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's"),
]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    state = tmp_path / "outer" / "state"
    state.mkdir(parents=True)
    (state / "ledger.db").write_bytes(b"rows")
    return state / "ledger.db"


def watched(path: Path) -> FilesInPlace:
    files = FilesInPlace({path: "the ledger", path.with_name("ledger.db-wal"): "the ledger"})
    assert files._watch is not None  # the watch, not the periodic look, is under test
    return files


def unlink(db: Path) -> None:
    db.unlink()


def rename_over(db: Path) -> None:
    db.with_name("copy.db").write_bytes(b"rows")
    os.replace(db.with_name("copy.db"), db)


def move_away(db: Path) -> None:
    os.rename(db, db.with_name("moved.db"))


def move_state_dir(db: Path) -> None:
    os.rename(db.parent, db.parent.with_name("moved"))


def move_an_ancestor(db: Path) -> None:
    outer = db.parent.parent
    os.rename(outer, outer.with_name("outer-moved"))


CHANGES = {
    "unlinked": unlink,
    "renamed over": rename_over,
    "moved away": move_away,
    "state dir moved": move_state_dir,
    "an ancestor moved": move_an_ancestor,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_on_the_way_to_a_file_is_seen_at_the_next_check(ledger: Path, change: str) -> None:
    files = watched(ledger)
    try:
        files.check()
        CHANGES[change](ledger)
        with pytest.raises(LedgerGone, match="the ledger file"):
            files.check()
        with pytest.raises(LedgerGone):
            files.check()  # and ever after
    finally:
        files.close()


def test_a_file_made_after_the_watch_is_held_and_its_removal_seen(ledger: Path) -> None:
    wal = ledger.with_name("ledger.db-wal")
    files = watched(ledger)
    try:
        wal.write_bytes(b"frames")  # SQLite makes its -wal later
        files.check()
        wal.unlink()
        with pytest.raises(LedgerGone, match=r"ledger\.db-wal"):
            files.check()
    finally:
        files.close()


def test_other_entries_changing_beside_the_files_are_not_a_change(ledger: Path) -> None:
    watch = NameWatch.watch([ledger])
    assert watch is not None
    try:
        assert not watch.changed()
        (ledger.parent / "ledger.db-shm").write_bytes(b"")
        (ledger.parent / "ledger.db-shm").unlink()
        (ledger.parent / "transcripts").mkdir()
        (ledger.parent / "transcripts" / "a1.jsonl").write_bytes(b"")
        os.rename(ledger.parent / "transcripts" / "a1.jsonl", ledger.parent / "transcripts" / "b")
        (ledger.parent.parent / "beside").write_bytes(b"")
        assert not watch.changed()
        os.rename(ledger, ledger.with_name("moved.db"))
        assert watch.changed()
        assert not watch.changed()  # the event was read once
    finally:
        watch.close()
    assert watch.changed()  # closed: the caller must look for itself


def test_a_path_through_a_symbolic_link_is_looked_at_not_watched(
    ledger: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(ledger.parent)
    assert NameWatch.watch([link / "ledger.db"]) is None
    files = FilesInPlace({link / "ledger.db": "the ledger"})
    try:
        files.check()
        ledger.unlink()
        with pytest.raises(LedgerGone, match="deleted"):
            files.check()
    finally:
        files.close()


def test_without_an_event_the_files_are_still_looked_at_now_and_then(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change no event reports (here: the watch's events read away by someone else,
    as a mount over a directory would make none) is found by the periodic look."""
    monkeypatch.setattr(inplace, "LOOK_EVERY", 3600.0)
    files = watched(ledger)
    try:
        files.check()
        ledger.unlink()
        assert files._watch is not None
        files._watch.changed()  # the unlink's event, taken: the watch has nothing to say
        files.check()  # not looked at: nothing said so, and the last look was recent
        monkeypatch.setattr(inplace, "LOOK_EVERY", 0.0)
        with pytest.raises(LedgerGone, match="deleted"):
            files.check()
    finally:
        files.close()
