"""Tests that kill mutants of the lifecycle core that `make mutate` (or a hand-made
mutant the issue named) found surviving: each says which change it catches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import GRACE, eventually
from workunits import Status, Supervisor, connect
from workunits._core import ids
from workunits._core.claim import Claim
from workunits._core.errors import InvalidWorkId, MailboxClosed, UnknownWork
from workunits._core.record import WorkRecord
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.deadlines import Deadlines, Due
from workunits.supervisor.actor.eviction import RECHECK, evictable
from workunits.supervisor.actor.registry import Registry
from workunits.testing import ManualClock, ScriptedDriver


def test_deadlines_due_at_the_same_moment_come_out_in_the_order_they_were_set() -> None:
    # Kills a push that drops the sequence number: equal times are then unordered
    # and the heap hands them out scrambled (0, 2, 4, 1, 3 for five). With it, a
    # tick handles what fell due at once in order, as a manual clock's tests expect.
    deadlines = Deadlines()
    whats = [Due.EVICT, Due.TIMEOUT, Due.ESCALATE, Due.EVICT, Due.TIMEOUT]
    set_ = [(f"b0000000{n}", what) for n, what in enumerate(whats)]
    for work_id, what in set_:
        deadlines.push(5.0, work_id, what)
    assert deadlines.pop_due(4.9) == []
    assert deadlines.pop_due(5.0) == set_
    assert len(deadlines) == 0


def test_a_record_whose_notice_is_not_written_may_not_leave_memory(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills an eviction rule without the ``notified`` check: until its notice is in
    # the outbox, the record is the only place the end is reported from.
    unit = drive.start()
    ended = drive.exit(unit.id, 0)
    later = clock.now() + GRACE
    ready = replace(ended, acknowledged=True)
    assert evictable(ready, later, gated=True)
    assert not evictable(replace(ready, notified=False), later, gated=True)
    assert not evictable(replace(ready, notified=False), later, gated=False)


@pytest.mark.parametrize("end", ["completed", "failed", "killed"])
def test_every_terminal_status_leaves_memory_after_its_grace(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock, end: str
) -> None:
    # Kills an inline terminal test that forgets one status (``killed`` above all):
    # such records would stay in memory for ever.
    unit = drive.start()
    if end == "completed":
        drive.exit(unit.id, 0)
    elif end == "failed":
        drive.fail(unit.id, "boom")
    else:
        assert msup.kill(unit.id)
    record = msup.wait(unit.id, timeout=5)
    assert record.status == Status(end)
    assert msup.notifications().get(timeout=5).id == unit.id
    clock.advance(GRACE)
    assert msup.tick() == 1
    assert unit.id not in msup.resident_ids()
    assert msup.get(unit.id).status == Status(end)  # now from the ledger


def _running_in_the_ledger(sup: Supervisor, work_id: str) -> None:
    assert sup.get(work_id).status == Status.RUNNING
    with connect(sup.state_dir) as client:
        assert client.get(work_id).status == Status.RUNNING


def test_a_unit_that_starts_at_submit_is_running_in_the_ledger_too(sup: Supervisor) -> None:
    # Kills a submit that inserts the row ``pending`` when the unit starts at once:
    # another process (a client, the HTTP API, the next supervisor) reads the ledger.
    handle = sup.shell(["sleep", "30"])
    try:
        _running_in_the_ledger(sup, handle.id)
    finally:
        sup.kill(handle.id)
        sup.wait(handle.id, timeout=10)


def test_a_queued_unit_that_starts_is_running_in_the_ledger_too(tmp_path: Path) -> None:
    # Kills a start of a queued unit that moves it to ``running`` in memory only.
    with Supervisor(
        tmp_path / "state", concurrency={"shell": 1}, install_signal_handlers=False
    ) as sup:
        first = sup.shell(["sleep", "30"])
        queued = sup.shell(["sleep", "30"])
        assert sup.get(queued.id).status == Status.PENDING
        sup.kill(first.id)
        sup.wait(first.id, timeout=10)
        eventually(
            lambda: sup.get(queued.id).status != Status.PENDING, 10, "the queued unit to start"
        )
        try:
            _running_in_the_ledger(sup, queued.id)
        finally:
            sup.kill(queued.id)
            sup.wait(queued.id, timeout=10)


# -- the eviction gate (supervisor/actor/eviction.py) ---------------------------------------


def _take(sup: Supervisor, work_id: str) -> None:
    assert sup.notifications().get(timeout=5).id == work_id


def test_a_childs_record_waits_for_its_running_parent_and_goes_when_the_parent_ends(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills a gate that forgets children (no parent lookup, or the wrong test on
    # its status), and an end that does not count its children's notices as
    # acknowledged at once (they would wait for the next recheck).
    parent = drive.start()
    child = drive.start(parent=parent.id)
    drive.exit(child.id, 0)
    clock.advance(GRACE * 10)
    assert msup.tick() == 0, "the running parent may still take its child's notice"
    assert child.id in msup.resident_ids()
    drive.exit(parent.id, 0)
    assert msup.tick() == 1, "nobody is left to take it: it goes at the next tick"
    assert msup.resident_ids() == {parent.id}


def test_a_child_that_outlives_its_evicted_parent_leaves_without_an_acknowledgement(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills a gate that reads the status of a parent no longer in memory.
    parent = drive.start()
    child = drive.start(parent=parent.id)
    drive.exit(parent.id, 0)  # its running child is killed: parent-ended
    assert msup.wait(child.id, timeout=5).status == Status.KILLED
    _take(msup, parent.id)
    hold = msup.retain(child.id, lease=1000)
    clock.advance(GRACE)
    assert msup.tick() == 1
    assert msup.resident_ids() == {child.id}
    assert hold.release()
    assert msup.tick() == 1
    assert msup.resident_ids() == set()


def test_a_notice_acknowledged_elsewhere_after_the_grace_is_found_at_the_recheck(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills a recheck pushed for no unit, for nothing, or in the past.
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE)
    assert msup.tick() == 0
    with connect(msup.state_dir) as client:
        assert client.notifications().get(timeout=5).id == unit.id
    clock.advance(RECHECK - 0.001)
    assert msup.tick() == 0
    clock.advance(0.001)
    assert msup.tick() == 1


def test_a_stale_deadline_of_an_evicted_record_is_ignored(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # The recheck left behind by an evicted record finds nothing in memory and is
    # skipped (by run_deadlines, which is why the candidate filter's `and` -> `or`
    # mutants in Eviction.run are equivalent: it only ever sees resident records).
    unit = drive.start()
    drive.exit(unit.id, 0)
    clock.advance(GRACE)
    assert msup.tick() == 0  # kept by its notice: a recheck is pushed
    _take(msup, unit.id)
    assert msup.tick() == 1
    clock.advance(RECHECK)
    assert msup.tick() == 0
    assert msup.get(unit.id).status == Status.COMPLETED


def test_a_release_of_an_evicted_unit_changes_nothing(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills a release that reads a record no longer in memory.
    unit = drive.start()
    drive.exit(unit.id, 0)
    _take(msup, unit.id)
    clock.advance(GRACE)
    assert msup.tick() == 1
    hold = msup.retain(unit.id, lease=1000)  # a viewer of the ledger's copy
    assert hold.release()
    assert msup.tick() == 0
    assert msup.get(unit.id).status == Status.COMPLETED


def _capped(tmp_path: Path, clock: ManualClock) -> Supervisor:
    return Supervisor(
        tmp_path / "state",
        clock=clock,
        tick_interval=None,
        install_signal_handlers=False,
        max_resident_ended=2,
        eviction_grace=GRACE,
    )


def test_the_cap_evicts_only_what_is_over_it(tmp_path: Path, clock: ManualClock) -> None:
    # Kills an off-by-one in the cap either way: at the cap nothing goes, one
    # over it exactly one goes.
    with _capped(tmp_path, clock) as sup:
        drive = ScriptedDriver(sup)
        units = [drive.start() for _ in range(3)]
        for unit in units[:2]:
            drive.exit(unit.id, 0)
        assert sup.tick() == 0
        drive.exit(units[2].id, 0)
        assert sup.tick() == 1
        assert sup.resident_ids() == {units[1].id, units[2].id}


def test_a_record_evicted_by_its_rule_no_longer_counts_towards_the_cap(
    tmp_path: Path, clock: ManualClock
) -> None:
    # Kills an eviction that leaves the unit in the cap's list of ended records.
    with _capped(tmp_path, clock) as sup:
        drive = ScriptedDriver(sup)
        first = drive.start()
        drive.exit(first.id, 0)
        _take(sup, first.id)
        clock.advance(GRACE)
        assert sup.tick() == 1
        later = [drive.start() for _ in range(2)]
        for unit in later:
            drive.exit(unit.id, 0)
        assert sup.tick() == 0
        assert sup.resident_ids() == {u.id for u in later}


# -- claims (workunits._core.claim) --------------------------------------------------------


def test_a_claim_settles_once_whichever_way() -> None:
    # Kills a settle that forgets it settled: a second ack, or a release after an
    # ack, would hand an acknowledged notice out again.
    calls: list[str] = []

    def ack() -> bool:
        calls.append("ack")
        return True

    def release() -> bool:
        calls.append("release")
        return True

    claim = Claim("notice", ack=ack, release=release)
    assert claim.renew(5.0), "a process-bound claim holds until settled"
    assert claim.ack()
    assert not claim.ack()
    assert not claim.release()
    assert not claim.renew(5.0)
    assert calls == ["ack"]


def test_a_leased_claim_renews_through_its_lease_and_a_plain_one_settles_as_told() -> None:
    # Kills a claim that drops its renew: a remote consumer's lease would lapse
    # while it still works on the notice. And the default settle says it settled.
    leases: list[float] = []

    def renew(lease: float) -> bool:
        leases.append(lease)
        return False  # lost: the lease had lapsed

    leased = Claim("notice", renew=renew)
    assert not leased.renew(7.5)
    assert leases == [7.5]
    assert Claim("event").release() is True  # a monitor event: nothing to hand back


# -- IDs (workunits._core.ids): bad input says what was wrong ----------------------------------


def test_id_errors_say_what_was_given_and_what_is_expected() -> None:
    with pytest.raises(InvalidWorkId, match=r"one letter a-z, got 'ab'"):
        ids.mint("ab")
    with pytest.raises(InvalidWorkId, match=r"is a str, got int"):
        ids.validate(42)


@pytest.mark.parametrize("letter", ["ab", "", "B", "1", 7, None])
def test_a_kind_letter_is_exactly_one_letter_a_to_z(letter: object) -> None:
    with pytest.raises(InvalidWorkId, match=r"a kind letter is one letter a-z, got "):
        ids.validate_letter(letter)
    assert ids.validate_letter("q") == "q"


# -- the registry (supervisor/actor/registry.py) -------------------------------------------


def _record(work_id: str, parent: str | None = None) -> WorkRecord:
    return WorkRecord(work_id, "x", Status.COMPLETED, parent, "", 0.0)


def test_removing_records_keeps_the_children_index_exact() -> None:
    # Kills a remove that leaves the child in its parent's index, or drops the
    # index while siblings remain: ending a parent would then miss (or invent) children.
    registry = Registry()
    parent, first, second = "x00000001", "x00000002", "x00000003"
    registry.insert(_record(parent))
    registry.insert(_record(first, parent))
    registry.insert(_record(second, parent))
    assert registry.children(parent) == {first, second}
    assert registry.remove(first).id == first
    assert registry.children(parent) == {second}
    registry.remove(second)
    assert registry.children(parent) == set()
    registry.remove(parent)
    assert len(registry) == 0
    with pytest.raises(UnknownWork, match=r"no work unit 'x00000001' in this supervisor"):
        registry.get(parent)


def test_a_unit_a_client_submitted_leaves_without_an_acknowledgement_here(
    msup: Supervisor, clock: ManualClock
) -> None:
    # Kills a gate that forgets adopted units: their notices are the client's, read
    # from the ledger, so nothing in this process will ever acknowledge them.
    with connect(msup.state_dir) as client:
        work_id = client.shell(["true"]).id

    def adopted_and_ran() -> bool:
        msup.tick()
        return work_id in msup.resident_ids() and msup.get(work_id).status == Status.COMPLETED

    eventually(adopted_and_ran, 20, "the supervisor to adopt and run it")
    clock.advance(GRACE)
    assert msup.tick() == 1
    assert work_id not in msup.resident_ids()


def test_the_cap_passes_over_a_record_a_stream_holds(tmp_path: Path, clock: ManualClock) -> None:
    # Kills a cap that takes any record (``or`` for ``and`` on ``retain == 0``): the
    # oldest record is being streamed, so the cap takes the next oldest instead.
    with _capped(tmp_path, clock) as sup:
        drive = ScriptedDriver(sup)
        units = [drive.start() for _ in range(3)]
        stream = sup.stream(units[0].id)
        for unit in units:
            drive.exit(unit.id, 0)
        assert sup.tick() == 1
        assert sup.resident_ids() == {units[0].id, units[2].id}
        stream.close()


def test_an_evicted_parent_s_own_mailbox_is_closed(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # Kills an eviction that forgets the unit's notice but not its mailbox as a
    # parent: a reader holding that mailbox would wait for ever, and it would stay.
    parent = drive.start()
    box = msup._ask(rq.MailboxOf(parent.id))
    drive.exit(parent.id, 0)
    _take(msup, parent.id)
    clock.advance(GRACE)
    assert msup.tick() == 1
    with pytest.raises(MailboxClosed):
        box.get(timeout=0)
