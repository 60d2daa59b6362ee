"""Lazy, gated eviction (invariant 8), on manual time.

A record leaves memory only when terminal, notified, past its grace and unretained.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import GRACE
from workunits import Status, Supervisor, UnknownWork, connect
from workunits.testing import ManualClock, ScriptedDriver


def test_a_terminal_record_stays_until_the_grace_is_over(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    record = drive.exit(unit.id, 0)
    assert record.notified
    assert record.evict_after == clock.now() + GRACE
    assert record.ended_at == clock.now()
    clock.advance(GRACE - 0.001)
    assert msup.tick() == 0
    assert msup.get(unit.id) == record
    clock.advance(0.001)
    assert msup.tick() == 1
    assert unit.id not in msup.resident_ids()
    # The ledger answers for it now (invariant 8), with how it ended and its tail.
    from_ledger = msup.get(unit.id)
    assert (from_ledger.status, from_ledger.ended_at) == (record.status, record.ended_at)
    assert from_ledger.output_tail == record.output_tail
    assert [r.id for r in msup.list()] == [unit.id]


def test_an_evicted_unit_reads_from_the_ledger_and_cannot_be_held(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE)
    assert msup.tick() == 1
    assert msup.get(unit.id).status == Status.COMPLETED
    assert msup.wait(unit.id).status == Status.COMPLETED
    assert msup.result(unit.id).id == unit.id
    assert msup.kill(unit.id) is False
    assert msup.cancel(unit.id) is False
    for call in (msup.read_output, msup.retain, msup.release):
        with pytest.raises(UnknownWork, match="left memory"):
            call(unit.id)


def test_running_units_are_never_evicted(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    clock.advance(1e6)
    assert msup.tick() == 0
    assert msup.get(unit.id).evict_after is None


def test_a_unit_retained_before_its_end_is_never_evicted_until_released(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    msup.retain(unit.id)
    record = drive.exit(unit.id, 0)
    assert record.evict_after is None
    clock.advance(1e6)
    assert msup.tick() == 0
    released = msup.release(unit.id)
    assert released.retain == 0
    assert released.evict_after == clock.now() + GRACE
    clock.advance(GRACE - 0.001)
    assert msup.tick() == 0
    clock.advance(0.001)
    assert msup.tick() == 1


def test_a_viewer_retaining_an_ended_unit_holds_it(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE / 2)
    assert msup.retain(unit.id).evict_after is None
    clock.advance(GRACE * 10)
    assert msup.tick() == 0
    assert msup.get(unit.id).retain == 1


def test_release_restarts_the_grace(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE - 1)
    msup.retain(unit.id)
    msup.release(unit.id)
    clock.advance(1)  # the original deadline: no longer the one that counts
    assert msup.tick() == 0
    assert msup.get(unit.id).retain == 0
    clock.advance(GRACE - 1.001)
    assert msup.tick() == 0
    clock.advance(0.001)
    assert msup.tick() == 1


def test_a_release_after_the_original_deadline_passed_still_evicts_later(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    msup.retain(unit.id)
    clock.advance(GRACE)
    assert msup.tick() == 0  # the end's deadline comes due while retained
    msup.release(unit.id)
    clock.advance(GRACE)
    assert msup.tick() == 1, "the release must bring its own deadline"


def test_nested_retains_need_as_many_releases(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    msup.retain(unit.id)
    msup.retain(unit.id)
    drive.exit(unit.id, 0)
    assert msup.release(unit.id).retain == 1
    clock.advance(GRACE * 2)
    assert msup.tick() == 0
    assert msup.release(unit.id).retain == 0
    clock.advance(GRACE)
    assert msup.tick() == 1


def test_release_without_a_retain_is_a_no_op(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    record = drive.exit(unit.id, 0)
    assert msup.release(unit.id) == record
    assert msup.release(unit.id).retain == 0


def test_ticks_evict_only_what_is_due(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    early, late, running = drive.start(), drive.start(), drive.start()
    drive.exit(early.id, 0)
    clock.advance(5)
    drive.exit(late.id, 1)
    clock.advance(GRACE - 5)
    assert msup.tick() == 1
    assert msup.resident_ids() == {late.id, running.id}
    clock.advance(5)
    assert msup.tick() == 1
    assert msup.resident_ids() == {running.id}


def test_a_retain_request_for_an_evicted_unit_holds_its_ledger_row(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE)
    msup.tick()
    assert unit.id not in msup.resident_ids()  # only the ledger knows it now
    with connect(msup.state_dir) as client:
        seq = client.request("retain", unit.id)
        assert seq is not None
        msup.tick()
        assert client.request_result(seq) == {"changed": True, "status": "completed"}
        assert client.row(unit.id).retain == 1  # expiry leaves it alone
        seq = client.request("release", unit.id)
        assert seq is not None
        msup.tick()
        assert client.request_result(seq) == {"changed": True, "status": "completed"}
        assert client.row(unit.id).retain == 0
        seq = client.request("release", unit.id)  # one release too many changes nothing
        assert seq is not None
        msup.tick()
        assert client.request_result(seq) == {"changed": False, "status": "completed"}


def test_the_default_eviction_grace_is_thirty_seconds(tmp_path: Path) -> None:
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        drive = ScriptedDriver(sup)
        unit = drive.start()
        drive.exit(unit.id, 0)
        sup.notifications().get(timeout=5)  # the parent took its notice
        clock.advance(30.0 - 0.001)
        assert sup.tick() == 0
        assert unit.id in sup.resident_ids()
        clock.advance(0.001)
        assert sup.tick() == 1
        assert unit.id not in sup.resident_ids()
