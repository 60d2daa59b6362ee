"""Lazy eviction, gated by the mailbox (invariant 8), on manual time.

A record leaves memory only when it is terminal, its notice is acknowledged
(or nobody is left to acknowledge it), its grace is over and no retain lease
holds it. Reads of an evicted unit are answered from the ledger.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import GRACE, eventually
from workunits import (
    InvalidWorkId,
    Notification,
    SpecError,
    Status,
    Supervisor,
    UnknownWork,
    WorkExpired,
    connect,
)
from workunits.supervisor.actor.eviction import RECHECK
from workunits.supervisor.actor.ledger_mirror import EXPIRE_EVERY
from workunits.testing import ManualClock, ScriptedDriver


def _take(sup: Supervisor, work_id: str) -> Notification:
    """Take (claim and acknowledge) the application's notice of ``work_id``, as a parent would."""
    notice = sup.notifications().get(timeout=5)
    assert isinstance(notice, Notification)
    assert notice.id == work_id
    return notice


def test_a_terminal_record_stays_until_the_grace_is_over(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    record = drive.exit(unit.id, 0)
    assert record.notified
    assert record.evict_after == clock.now() + GRACE
    assert record.ended_at == clock.now()
    _take(msup, unit.id)
    clock.advance(GRACE - 0.001)
    assert msup.tick() == 0
    assert msup.get(unit.id).acknowledged
    clock.advance(0.001)
    assert msup.tick() == 1
    assert unit.id not in msup.resident_ids()
    # The ledger answers for it now (invariant 8), with how it ended and its tail.
    from_ledger = msup.get(unit.id)
    assert (from_ledger.status, from_ledger.ended_at) == (record.status, record.ended_at)
    assert from_ledger.output_tail == record.output_tail
    assert [r.id for r in msup.list()] == [unit.id]


def test_an_unread_notice_keeps_the_record_past_its_grace(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.write(unit.id, b"all of it\n")
    drive.exit(unit.id, 0)
    clock.advance(GRACE * 100)
    assert msup.tick() == 0
    assert unit.id in msup.resident_ids()
    assert msup.read_output(unit.id) == b"all of it\n"  # the parent can still read it
    _take(msup, unit.id)
    assert msup.tick() == 1  # acknowledged after its grace: it goes at the next tick


def test_a_notice_acknowledged_by_another_process_lets_the_record_go(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    with connect(msup.state_dir) as client:
        assert client.notifications().get(timeout=5).id == unit.id
    clock.advance(GRACE)
    assert msup.tick() == 1, "the ledger says it was acknowledged"


def test_a_released_claim_keeps_the_record_until_taken_again(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    held = msup.notifications().claim(timeout=5)
    assert held.release()
    clock.advance(GRACE + RECHECK)
    assert msup.tick() == 0
    notice = _take(msup, unit.id)
    assert notice.redelivered
    assert msup.tick() == 1


def test_an_evicted_unit_is_read_from_the_ledger(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.write(unit.id, b"0123456789")
    assert msup.read_output(unit.id, max_bytes=4) == b"0123"
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    clock.advance(GRACE)
    assert msup.tick() == 1
    assert msup.get(unit.id).status == Status.COMPLETED
    # Its notice was taken: the ledger's record says so, as memory's did.
    assert msup.get(unit.id).acknowledged
    assert [r.acknowledged for r in msup.list()] == [True]
    assert msup.wait(unit.id).status == Status.COMPLETED
    assert msup.result(unit.id).id == unit.id
    assert msup.kill(unit.id) is False
    assert msup.cancel(unit.id) is False
    # The read offset went to the ledger with the record: reading carries on.
    assert msup.read_output(unit.id, max_bytes=3) == b"456"
    assert msup.read_output(unit.id) == b"789"
    assert msup.read_output(unit.id) == b""
    chunk = msup.read_output(unit.id, offset=2)
    assert (chunk.data, chunk.start, chunk.next_offset, chunk.ended) == (
        b"23456789",
        2,
        10,
        True,
    )
    assert b"".join(msup.stream(unit.id)) == b""  # nothing left after the offset


def test_running_units_are_never_evicted(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    clock.advance(1e6)
    assert msup.tick() == 0
    assert msup.get(unit.id).evict_after is None


def test_a_retain_lease_holds_the_record_until_released(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    retain = msup.retain(unit.id, lease=1000)
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    clock.advance(GRACE + RECHECK)
    assert msup.tick() == 0
    assert retain.release()
    assert not retain.release()
    assert msup.tick() == 1, "a release looks at the record again at once"


def test_release_by_id_ends_the_leases_retain_took(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    msup.retain(unit.id, lease=1000)  # the caller keeps no Retain
    msup.retain(unit.id, lease=1000)
    kept = msup.retain(unit.id, lease=1000)
    assert kept.release()  # one ended by its Retain: release(id) ends the other two
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    clock.advance(GRACE + RECHECK)
    assert msup.tick() == 0
    assert msup.release(unit.id) is True
    assert msup.release(unit.id) is False  # none held any more
    assert msup.tick() == 1


def test_a_clients_release_by_id_ends_its_lease(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        unit = sup.shell(["true"])
        sup.wait(unit.id, timeout=10)
    with connect(tmp_path / "state") as client:
        retain = client.retain(unit.id, lease=1000)
        assert client.release(unit.id) is True
        assert client.release(unit.id) is False
        assert not retain.renew()  # the lease is gone


def test_a_lease_nobody_renews_lapses(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    retain = msup.retain(unit.id, lease=GRACE * 2)
    clock.advance(GRACE)
    assert msup.tick() == 0
    assert retain.renew()  # a viewer still looking: GRACE * 2 from now
    clock.advance(GRACE * 2 - 0.001)
    assert msup.tick() == 0
    clock.advance(RECHECK)
    assert msup.tick() == 1  # lapsed, and looked at again
    assert not retain.renew()


@pytest.mark.parametrize("bad", [-5, 0, math.nan, math.inf, "10", True])
def test_a_renewal_with_a_bad_lease_is_refused_and_the_lease_stays_as_it_was(
    msup: Supervisor, drive: ScriptedDriver, bad: object
) -> None:
    unit = drive.start()
    retain = msup.retain(unit.id, lease=GRACE * 2)
    with pytest.raises(SpecError, match="lease"):
        retain.renew(bad)  # type: ignore[arg-type]
    assert retain.lease == GRACE * 2
    assert retain.renew()  # still renewable with the lease it had
    assert retain.release()


@pytest.mark.parametrize("every", [0, -1, math.nan, "x", 1e300, GRACE * 2, GRACE * 3])
def test_keep_renewing_refuses_an_interval_that_is_no_number_or_not_shorter_than_the_lease(
    msup: Supervisor, drive: ScriptedDriver, every: object
) -> None:
    unit = drive.start()
    retain = msup.retain(unit.id, lease=GRACE * 2)
    with pytest.raises(SpecError, match="every"):
        retain.keep_renewing(every)  # type: ignore[arg-type]
    names = {t.name for t in threading.enumerate()}
    assert f"workunits-retain-{unit.id}" not in names, "no keeper thread for a refused call"
    assert retain.release()


def test_two_viewers_hold_two_leases(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    first, second = msup.retain(unit.id), msup.retain(unit.id)
    assert first.lease_id != second.lease_id
    clock.advance(GRACE)
    first.release()
    assert msup.tick() == 0
    with second:
        pass
    assert msup.tick() == 1


def test_a_retain_held_by_a_process_that_exited_lapses_at_once(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    code = (
        "import sys, workunits as wu\n"
        "c = wu.connect(sys.argv[1])\n"
        "c.retain(sys.argv[2], lease=1e6)\n"
    )  # exits holding a lease it never releases
    subprocess.run(
        [sys.executable, "-c", code, str(msup.state_dir), unit.id], check=True, timeout=60
    )
    clock.advance(GRACE)
    assert msup.tick() == 1


def test_ticks_evict_only_what_is_due(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    early, late, running = drive.start(), drive.start(), drive.start()
    drive.exit(early.id, 0)
    clock.advance(5)
    drive.exit(late.id, 1)
    msup.notifications().get(timeout=5)
    msup.notifications().get(timeout=5)
    clock.advance(GRACE - 5)
    assert msup.tick() == 1
    assert msup.resident_ids() == {late.id, running.id}
    clock.advance(5)
    assert msup.tick() == 1
    assert msup.resident_ids() == {running.id}


def test_past_the_cap_the_oldest_ended_records_leave_unread(tmp_path: Path) -> None:
    # A daemon nobody reads from must not grow without bound (max_resident_ended).
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state",
        clock=clock,
        tick_interval=None,
        install_signal_handlers=False,
        max_resident_ended=2,
    ) as sup:
        drive = ScriptedDriver(sup)
        units = [drive.start() for _ in range(4)]
        for unit in units:
            drive.exit(unit.id, 0)
            clock.advance(1)
        assert sup.tick() == 2
        assert sup.resident_ids() == {units[2].id, units[3].id}
        assert sup.get(units[0].id).status == Status.COMPLETED  # from the ledger
        assert not sup.get(units[0].id).acknowledged
        # Their notices were never read: they are still there for the parent.
        taken = {sup.notifications().get(timeout=5).id for _ in units}
        assert taken == {u.id for u in units}
        assert sup.get(units[0].id).acknowledged  # and now they were
        with connect(tmp_path / "state") as client:  # another reader of the ledger
            assert [r.acknowledged for r in client.list()] == [True] * 4
            assert client.get(units[1].id).acknowledged
            assert client.wait(units[1].id, timeout=0).acknowledged


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


def test_a_child_that_ends_after_its_parent_leaves_memory_after_its_grace(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Nobody is left to take the child's notice: its parent ended first.
    parent = drive.start()
    child = drive.start(parent=parent.id)
    drive.exit(parent.id, 0)
    assert msup.wait(child.id, timeout=5).status == Status.KILLED  # its parent's end ends it
    clock.advance(GRACE + 1)
    msup.tick()
    assert child.id not in msup.resident_ids()
    assert parent.id in msup.resident_ids()  # its own notice is still unread


def test_a_remote_viewer_cannot_retain_a_unit_the_ledger_never_saw(msup: Supervisor) -> None:
    with pytest.raises(UnknownWork):
        msup.http_consumers.retain("b00000000", 30.0, "a-viewer")
    with pytest.raises(InvalidWorkId):
        msup.http_consumers.retain("q1234", 30.0, "a-viewer")


def test_a_renewing_retain_stops_quietly_when_its_supervisor_closes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup = Supervisor(tmp_path / "state", install_signal_handlers=False)
    unit = sup.shell(["true"])
    sup.wait(unit.id, timeout=10)
    sup.retain(unit.id, lease=5).keep_renewing(every=0.01)
    name = f"workunits-retain-{unit.id}"
    assert any(t.name == name for t in threading.enumerate())
    sup.close()
    eventually(lambda: all(t.name != name for t in threading.enumerate()))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_unit_that_expires_while_in_memory_reads_expired(tmp_path: Path) -> None:
    # Its notice was never taken, so it stays in memory: the ledger said expired,
    # and reads of the record in memory went on serving its result (HTTP 200, not 410).
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state",
        clock=clock,
        tick_interval=None,
        install_signal_handlers=False,
        expire_after=60,
    ) as sup:
        drive = ScriptedDriver(sup)
        unit = drive.start()
        drive.exit(unit.id, 0)
        clock.advance(61 + EXPIRE_EVERY)
        sup.tick()
        assert unit.id in sup.resident_ids()
        record = sup.get(unit.id)
        assert (record.shown_status, record.output_tail) == ("expired", b"")
        with pytest.raises(WorkExpired):
            sup.result(unit.id)
        # Listed as a client lists it: as expired, no longer as completed.
        assert [r.id for r in sup.list(status="expired")] == [unit.id]
        assert sup.list(status="completed") == []
