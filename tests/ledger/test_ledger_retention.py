"""Retention: expired units keep a small row that reads `expired`; gc forgets them later."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledger.support import ManualClock, new_unit, start
from workunits._core.errors import UnknownWork
from workunits._core.status import Status
from workunits._ledger import EXPIRED, Ledger
from workunits._util import procid


def _ended(ledger: Ledger, *, retain: int = 0) -> str:
    """An ended unit, held by ``retain`` live leases (of this process)."""
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.save_checkpoint(unit.id, 1, {"group": 8})
    ledger.attempts.write(
        unit.id,
        attempt=1,
        status="completed",
        result={"rows": 5},
        output_tail=b"tail",
        output_bytes=4,
    )
    for _ in range(retain):
        ledger.retains.add(unit.id, lease=1e6)
    return unit.id


def test_expire_drops_the_heavy_columns_and_keeps_a_small_row(
    ledger: Ledger, clock: ManualClock
) -> None:
    work_id = _ended(ledger)
    clock.advance(99)
    assert ledger.retention.expire() == 0
    assert ledger.units.load_result(work_id) == {"rows": 5}
    clock.advance(2)
    assert ledger.retention.expire() == 1
    row = ledger.units.require(work_id)
    assert row.shown_status == EXPIRED
    assert row.status == Status.COMPLETED  # how it ended is kept
    assert (row.result, row.checkpoint, row.output_tail, row.spec) == (None, None, b"", None)
    assert row.output_bytes == 4
    assert ledger.units.load_result(work_id) is None
    with pytest.raises(UnknownWork, match="expired"):
        ledger.units.load_spec(work_id)
    assert ledger.retention.expire() == 0


def test_running_and_retained_units_do_not_expire(ledger: Ledger, clock: ManualClock) -> None:
    running = start(ledger, new_unit(ledger).id).id
    retained = _ended(ledger)
    lease = ledger.retains.add(retained, lease=20_000)
    clock.advance(10_000)
    assert ledger.retention.expire() == 0
    assert ledger.retains.release(lease)
    assert ledger.retention.expire() == 1
    assert ledger.units.require(running).shown_status == "running"


def test_list_shows_expired_units_apart(ledger: Ledger, clock: ManualClock) -> None:
    old = _ended(ledger)
    clock.advance(200)
    fresh = _ended(ledger)
    ledger.retention.expire()
    assert [r.id for r in ledger.units.list(status=EXPIRED)] == [old]
    assert [r.id for r in ledger.units.list(status="completed")] == [fresh]
    assert [r.id for r in ledger.units.list(status=Status.COMPLETED, limit=5)] == [fresh]
    assert len(ledger.units.list()) == 2


def test_gc_forgets_long_expired_units_and_old_bookkeeping(
    ledger: Ledger, clock: ManualClock
) -> None:
    work_id = _ended(ledger)
    ledger.outbox.mark_delivered(work_id, Status.COMPLETED)
    seq = ledger.requests.add("kill", work_id)
    ledger.requests.take(1)
    ledger.requests.finish(seq)
    ledger.sessions.open("s00000001", 1)
    ledger.sessions.close("s00000001")
    clock.advance(150)
    assert ledger.retention.gc() == 0  # expired now, forgotten only expire_after later
    assert ledger.units.require(work_id).expired
    clock.advance(150)
    assert ledger.retention.gc() == 1
    assert ledger.units.get(work_id) is None
    assert ledger.outbox.undelivered(None) == []
    assert ledger.requests.get(seq) is None
    assert ledger.sessions.get("s00000001") is None


def test_a_lease_that_lapsed_or_whose_holder_died_holds_nothing(
    ledger: Ledger, clock: ManualClock
) -> None:
    lapsed = _ended(ledger)
    ledger.retains.add(lapsed, lease=10)
    orphaned = _ended(ledger)
    # A holder on this host whose process has gone: its lease lapses at once.
    ledger.retains.add(orphaned, lease=1e6, owner=_dead_process_owner())
    clock.advance(10_000)
    assert ledger.retains.held() == set()
    assert ledger.retention.expire() == 2


def _dead_process_owner() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host, boot, _, _ = procid.this_process().split("/")
    return f"{host}/{boot}/{proc.pid}/1"


def test_gc_keeps_unacknowledged_notices_of_units_it_keeps(
    ledger: Ledger, clock: ManualClock
) -> None:
    kept = _ended(ledger)
    acked = _ended(ledger)
    assert ledger.outbox.mark_delivered(acked, Status.COMPLETED)
    assert ledger.retention.gc() == 0  # nothing is due yet
    assert [n.id for n in ledger.outbox.undelivered(None)] == [kept]
    assert ledger.outbox.size() == 1


def test_expiry_and_gc_drop_the_notices_of_units_they_drop(
    ledger: Ledger, clock: ManualClock
) -> None:
    # A notice nobody reads (every root unit under `serve`) must not keep the
    # outbox growing: it goes when its unit expires.
    work_id = _ended(ledger)
    clock.advance(150)
    assert ledger.retention.expire() == 1
    assert ledger.outbox.undelivered(None) == []
    other = _ended(ledger)
    assert ledger.retention.gc(older_than=0) == 1  # forgets `work_id`; `other` is not due
    assert ledger.units.get(work_id) is None
    assert [n.id for n in ledger.outbox.undelivered(None)] == [other]


def test_list_refuses_a_status_that_does_not_exist(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="'done' is not a status"):
        ledger.units.list(status="done")


def test_expire_ended_before_expires_early_and_counts_what_it_dropped(
    ledger: Ledger, clock: ManualClock
) -> None:
    old = _ended(ledger)
    clock.advance(50)
    young = _ended(ledger)
    retained = _ended(ledger, retain=1)
    running = start(ledger, new_unit(ledger).id).id
    units, freed = ledger.retention.expire_ended_before(clock.now() - 10)
    assert units == 1
    assert freed > len(b"tail") + len(b'{"rows":5}')
    assert ledger.units.require(old).shown_status == EXPIRED
    for work_id in (young, retained, running):
        assert ledger.units.require(work_id).shown_status != EXPIRED
    clock.advance(100)  # young's expire_at (ended + 100) is due; retained waits
    assert ledger.retention.expire_ended_before(0.0)[0] == 1
    assert ledger.units.require(young).shown_status == EXPIRED
    assert ledger.units.require(retained).shown_status == "completed"


def test_list_ended_after_keeps_units_that_ended_since(ledger: Ledger, clock: ManualClock) -> None:
    old = _ended(ledger)
    clock.advance(50)
    fresh = _ended(ledger)
    running = start(ledger, new_unit(ledger).id).id
    assert [r.id for r in ledger.units.list(ended_after=clock.now())] == [fresh]
    assert {r.id for r in ledger.units.list(ended_after=0.0)} == {old, fresh}
    assert running not in [r.id for r in ledger.units.list(ended_after=0.0)]


def _transcript(ledger: Ledger, work_id: str, size: int) -> Path:
    folder = ledger.state_dir / "transcripts"
    folder.mkdir(exist_ok=True)
    path = folder / f"{work_id}.jsonl"
    path.write_bytes(b"x" * size)
    return path


def test_a_transcript_goes_when_its_unit_expires(ledger: Ledger, clock: ManualClock) -> None:
    due, retained = _ended(ledger), _ended(ledger, retain=1)
    paths = {work_id: _transcript(ledger, work_id, 10) for work_id in (due, retained)}
    clock.advance(101)
    assert ledger.retention.expire() == 1
    assert not paths[due].exists()
    assert paths[retained].exists()  # a retained unit keeps everything, its transcript too


def test_gc_older_than_counts_the_transcripts_it_frees(ledger: Ledger, clock: ManualClock) -> None:
    with_transcript, without = _ended(ledger), _ended(ledger)
    path = _transcript(ledger, with_transcript, 5000)
    units, freed = ledger.retention.expire_ended_before(clock.now())
    assert units == 2  # a unit with no transcript (a shell) expires all the same
    assert freed >= 5000
    assert not path.exists()
    assert ledger.units.require(without).shown_status == EXPIRED


def test_gc_forgets_old_firings_of_a_schedule_but_its_latest(
    ledger: Ledger, clock: ManualClock
) -> None:
    """A schedule firing every second added 86,400 rows a day that nothing deleted."""
    for due in (10.0, 20.0, 30.0):
        ledger.schedules.record_firing("nightly", due, None, due + 10)
        clock.advance(100)
    ledger.schedules.record_firing("other", 5.0, None, 15.0)
    clock.advance(10_000)
    ledger.retention.gc(older_than=1000)
    assert [(f.schedule, f.due_at) for f in ledger.schedules.firings()] == [
        ("nightly", 30.0),
        ("other", 5.0),
    ]
