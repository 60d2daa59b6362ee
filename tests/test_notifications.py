"""Notifications (invariants 7 and 11): exactly one per terminal unit, to its parent's mailbox."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterable

import pytest

from tests.helpers import WAIT, as_notice
from workunits import MailboxClosed, Notification, Reason, Status, Supervisor, WorkRecord
from workunits._ledger import Write, WriteOutcome
from workunits._ledger.attempts import Attempts
from workunits.supervisor.actor import requests as rq
from workunits.testing import ScriptedDriver
from workunits.testing._scripted import ExitWith


def test_each_terminal_unit_sends_exactly_one_notice_with_its_fields(sup: Supervisor) -> None:
    mailbox = sup.notifications()
    ok = sup.shell("echo fine", description="the good one")
    bad = sup.shell("echo sad >&2; exit 4")
    doomed = sup.shell(["sleep", "30"])
    sup.kill(doomed.id)
    sup.kill(doomed.id)  # a second kill must not make a second notice
    records = {u.id: sup.wait(u.id, WAIT) for u in (ok, bad, doomed)}
    notices: dict[str, Notification] = {}
    for _ in records:
        notice = as_notice(mailbox.get(timeout=WAIT))
        assert notice.id not in notices, f"two notices for {notice.id}"
        notices[notice.id] = notice
    assert set(notices) == set(records)
    with pytest.raises(TimeoutError):
        mailbox.get(timeout=0)
    for work_id, record in records.items():
        assert notices[work_id] == Notification.of(record)
    assert notices[ok.id].description == "the good one"
    assert notices[ok.id].output_tail == b"fine\n"
    assert (notices[ok.id].status, notices[ok.id].exit_code) == (Status.COMPLETED, 0)
    assert (notices[bad.id].status, notices[bad.id].exit_code) == (Status.FAILED, 4)
    assert notices[bad.id].output_tail == b"sad\n"
    killed = notices[doomed.id]
    assert (killed.status, killed.reason, killed.signal) == (
        Status.KILLED,
        Reason.KILLED,
        signal.SIGKILL,
    )
    assert killed.kind == "shell"
    assert killed.ended_at == records[doomed.id].ended_at


def test_get_times_out_on_an_empty_mailbox(msup: Supervisor) -> None:
    mailbox = msup.notifications()
    with pytest.raises(TimeoutError, match="no notification"):
        mailbox.get(timeout=0.01)
    assert mailbox.get_nowait() is None
    assert len(mailbox) == 0


def test_notices_arrive_in_the_order_units_ended(msup: Supervisor, drive: ScriptedDriver) -> None:
    units = [drive.start() for _ in range(5)]
    for unit in reversed(units):
        drive.exit(unit.id, 0)
    mailbox = msup.notifications()
    assert len(mailbox) == 5
    assert [mailbox.get(timeout=0).id for _ in units] == [u.id for u in reversed(units)]


def test_iteration_yields_notices_and_stops_when_the_supervisor_closes(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    mailbox = msup.notifications()
    first, second = drive.start(), drive.start()
    drive.exit(first.id, 0)
    drive.fail(second.id, "broken")
    notices = map(as_notice, mailbox)
    assert next(notices).id == first.id
    assert next(notices).error == "broken"
    third = drive.start()
    msup.close()  # kills `third` (reason shutdown), then closes the mailbox
    rest = list(notices)
    assert [(n.id, n.reason) for n in rest] == [(third.id, Reason.SHUTDOWN)]
    with pytest.raises(MailboxClosed):
        mailbox.get(timeout=0)


def test_a_child_notifies_its_parent_not_the_root(msup: Supervisor, drive: ScriptedDriver) -> None:
    parent = drive.start(description="parent")
    child = drive.start(description="child", parent=parent.id)
    drive.exit(child.id, 0)
    root = msup.notifications()
    assert root.get_nowait() is None, "the child's notice belongs to its parent"
    parents_box = msup._ask(rq.MailboxOf(parent.id))
    assert parents_box.get(timeout=0).id == child.id
    drive.exit(parent.id, 0)
    assert root.get(timeout=0).id == parent.id


def test_async_iteration_does_not_block_the_event_loop(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    units = [drive.start(), drive.start()]
    loop_ran = threading.Event()

    def end_units_once_the_loop_has_run() -> None:
        # If `async for` blocked the loop, the ticker never sets loop_ran: the
        # units still end (after the bound), and the assertion below fails.
        loop_ran.wait(WAIT)
        for unit in units:
            drive.exit(unit.id, 0)

    async def main() -> tuple[list[str], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1
                if ticks == 50:
                    loop_ran.set()

        ticking = asyncio.create_task(ticker())
        ender = threading.Thread(target=end_units_once_the_loop_has_run)
        ender.start()
        got: list[str] = []
        async for notice in msup.notifications():
            got.append(notice.id)
            if len(got) == len(units):
                break
        ticks_seen = ticks
        ticking.cancel()
        await asyncio.to_thread(ender.join, WAIT)
        return got, ticks_seen

    got, ticks_seen = asyncio.run(main())
    assert got == [u.id for u in units]
    assert ticks_seen >= 50, "the loop stood still while waiting for notices"


def test_get_async_times_out(msup: Supervisor) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            await msup.notifications().get_async(timeout=0.01)

    asyncio.run(main())


# -- group commit of ends ---------------------------------------------------------


@pytest.mark.timeout(60)
def test_ends_reported_back_to_back_commit_in_one_transaction(
    msup: Supervisor, drive: ScriptedDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[list[str]] = []
    real_write_many = Attempts.write_many

    def write_many(self: Attempts, batch: Iterable[Write]) -> list[WriteOutcome]:
        writes = list(batch)
        ends = [str(w.target) if isinstance(w.target, str) else w.target.id for w in writes]
        if any(w.notification is not None for w in writes):
            groups.append(ends)
        return real_write_many(self, writes)

    monkeypatch.setattr(Attempts, "write_many", write_many)
    units = [drive.start() for _ in range(5)]
    actors = [msup._ask(rq.UnitActor(u.id)) for u in units]
    blocker = drive.start()
    # Hold the supervisor thread inside a change subscriber while the five units
    # end, so that their EndReports queue up behind it, back to back.
    entered, release = threading.Event(), threading.Event()

    def hold(old: WorkRecord | None, new: WorkRecord) -> None:
        if new.id == blocker.id and new.retain:
            entered.set()
            release.wait(WAIT)

    msup._ask(rq.Subscribe(hold))
    # A stream's hold writes the record: the subscriber above sees it and blocks.
    holder = threading.Thread(target=lambda: msup._ask(rq.RetainUnit(blocker.id)))
    holder.start()
    try:
        assert entered.wait(WAIT)
        for actor in actors:
            actor.tell(ExitWith(0))
        for actor in actors:  # an actor stops right after it told its end
            assert actor.actor_stopped.wait(WAIT)
    finally:
        release.set()
        holder.join(WAIT)
    ends = [msup.wait(u.id, WAIT) for u in units]
    assert all(r.status is Status.COMPLETED for r in ends)
    # One fully synced transaction for the five, and the notices in its order.
    assert len(groups) == 1
    assert sorted(groups[0]) == sorted(u.id for u in units)
    mailbox = msup.notifications()
    assert [as_notice(mailbox.get(timeout=WAIT)).id for _ in units] == groups[0]
