"""Every event of a unit's stream has its own ID; a resume from any of them loses and
repeats nothing (``supervisor/events.py``), the snapshot's status, progress and
checkpoint included (they once shared one ID, so a resume lost the last two)."""

from __future__ import annotations

import pytest

import workunits as wu
from workunits.supervisor.events import END, Cursor, UnitEvent

WAIT = 60


def report_and_save(n: int) -> int:
    ctx = wu.current()
    for i in range(n):
        print(f"line {i}", flush=True)
        ctx.progress((i + 1) / n, f"step {i + 1}")
        ctx.checkpoint({"i": i})
    return n


def _drain(sup: wu.Supervisor, work_id: str, after: Cursor | None) -> list[UnitEvent]:
    """Every event after ``after``, read in small batches until the end."""
    events: list[UnitEvent] = []
    for _ in range(10_000):
        batch = sup.events(work_id, after, max_bytes=7)
        events += batch.events
        after = batch.cursor
        if batch.ended:
            return events
    raise AssertionError("no end")


def _shown(events: list[UnitEvent]) -> list[tuple[str, object]]:
    return [(e.type, e.output if e.type == "output" else e.data) for e in events]


@pytest.mark.timeout(120)
def test_a_resume_from_any_event_loses_and_repeats_nothing(sup: wu.Supervisor) -> None:
    sup.event_feed  # noqa: B018 - the journal from now on (as the HTTP API's is)
    unit = sup.agent(report_and_save, 3)
    sup.wait(unit.id, WAIT)
    whole = _drain(sup, unit.id, None)
    kinds = [e.type for e in whole]
    assert kinds[:3] == ["status", "progress", "checkpoint"]
    assert kinds[-1] == "end"
    ids = [str(e.cursor) for e in whole]
    assert len(ids) == len(set(ids)), ids  # each event has its own ID
    for i, event in enumerate(whole):
        again = _drain(sup, unit.id, Cursor.parse(str(event.cursor)))
        assert _shown(again) == _shown(whole[i + 1 :]), (i, event.type)


@pytest.mark.timeout(120)
def test_a_live_stream_resumed_anywhere_ends_with_every_change_once(sup: wu.Supervisor) -> None:
    sup.event_feed  # noqa: B018 - the journal from now on (as the HTTP API's is)
    unit = sup.agent(report_and_save, 40)
    first = sup.events(unit.id, None, max_bytes=5)
    head = first.events
    cut = head[len(head) // 2].cursor if head else first.cursor
    sup.wait(unit.id, WAIT)  # the journal moves on past the cut
    rest = _drain(sup, unit.id, cut)
    seen = [e for e in head if e.cursor <= cut] + rest
    ids = [str(e.cursor) for e in seen]
    assert len(ids) == len(set(ids))
    output = b"".join(e.output for e in seen if e.type == "output")
    transcript = b"".join(e.output for e in _drain(sup, unit.id, None) if e.type == "output")
    assert output == transcript  # nothing lost or repeated of the bytes
    assert seen[-1].type == "end"
    assert seen[-1].cursor.part == END
    assert [e for e in _drain(sup, unit.id, seen[-1].cursor)] == []  # after the end: nothing
    checkpoints = [e.data["attempt"] for e in seen if e.type == "checkpoint"]
    assert checkpoints  # the checkpoints reached the follower


def test_cursors_round_trip_and_refuse_junk() -> None:
    for text in ("0-0", "3-17-2", "3-17-2-1", "9-0-1-4"):
        assert str(Cursor.parse(text)) == text
    with pytest.raises(wu.InvalidArgument):
        Cursor.parse("3-17-2-9")
