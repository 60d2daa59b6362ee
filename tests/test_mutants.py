"""Tests that kill mutants of the lifecycle core that `make mutate` (or a hand-made
mutant the issue named) found surviving: each says which change it catches."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import GRACE
from workunits import Status, Supervisor, connect
from workunits.supervisor.sweep import Deadlines, Due, evictable
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
        deadline = time.monotonic() + 10
        while sup.get(queued.id).status == Status.PENDING:
            assert time.monotonic() < deadline, "the queued unit never started"
            time.sleep(0.01)
        try:
            _running_in_the_ledger(sup, queued.id)
        finally:
            sup.kill(queued.id)
            sup.wait(queued.id, timeout=10)
