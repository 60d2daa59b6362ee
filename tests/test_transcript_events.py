"""The supervisor's own transcript events: ``append_event`` continues the unit's sequence."""

from __future__ import annotations

import errno
from pathlib import Path

import orjson
import pytest

from workunits._unit.transcript import append_event, last_seq

pytestmark = pytest.mark.timeout(10)


def _events(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_an_appended_event_takes_the_seq_after_the_last_whole_one(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    # What a unit wrote, its last line torn by its death mid-write.
    path.write_bytes(b'{"seq":1,"type":"start"}\n{"seq":2,"type":"progress"}\n{"seq":3,"ty')
    assert last_seq(str(path)) == 2
    path.write_bytes(path.read_bytes() + b"\n")  # the capture ends a torn line
    append_event(str(path), "end", status="failed")
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    assert (last["seq"], last["type"], last["status"]) == (3, "end", "failed")
    append_event(str(path), "note")
    assert last_seq(str(path)) == 4


def test_an_empty_or_missing_transcript_starts_at_one(tmp_path: Path) -> None:
    assert last_seq(str(tmp_path / "none.jsonl")) == 0
    path = tmp_path / "empty.jsonl"
    path.touch()
    append_event(str(path), "end")
    assert [e["seq"] for e in _events(path)] == [1]


def test_appending_through_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    link = tmp_path / "t.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic links") as raised:
        append_event(str(link), "end")
    assert raised.value.errno == errno.ELOOP
    assert target.read_bytes() == b""
