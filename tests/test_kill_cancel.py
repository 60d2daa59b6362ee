"""Ending work early (invariant 9), and what wait/result say about it, blocking and async."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from tests.helpers import WAIT
from workunits import (
    NotFinished,
    Reason,
    SpecError,
    Status,
    Supervisor,
    WorkFailed,
    WorkKilled,
    connect,
)
from workunits.supervisor.actor import requests as rq
from workunits.testing import ManualClock, ScriptedDriver, ScriptSpec
from workunits.testing._scripted import ExitWith


def test_kill_of_a_running_unit_returns_true_and_ends_it(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    assert msup.kill(unit.id) is True
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.reason, record.signal) == (
        Status.KILLED,
        Reason.KILLED,
        signal.SIGKILL,
    )


def test_kill_of_a_terminal_unit_is_a_no_op_returning_false(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    record = drive.exit(unit.id, 0)
    assert msup.kill(unit.id) is False
    assert msup.cancel(unit.id) is False
    assert msup.get(unit.id) == record
    assert len(msup.notifications()) == 1


def test_a_second_kill_is_safe(msup: Supervisor, drive: ScriptedDriver) -> None:
    unit = drive.start(ScriptSpec(ignore_cancel=True))
    assert msup.kill(unit.id) is True
    second = msup.kill(unit.id)  # while the first is still landing, or after
    assert second is False
    assert msup.wait(unit.id, WAIT).reason == Reason.KILLED
    assert msup.kill(unit.id) is False
    assert len(msup.notifications()) == 1


def test_kill_during_a_cancel_keeps_the_cancel_as_the_reason(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start(ScriptSpec(ignore_cancel=True))
    assert msup.cancel(unit.id, grace=30) is True
    assert drive.signals(unit.id) == (signal.SIGTERM,)
    assert msup.cancel(unit.id, grace=30) is False
    assert msup.kill(unit.id) is True, "kill escalates a cancel in progress"
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.reason, record.signal) == (
        Status.KILLED,
        Reason.CANCELLED,
        signal.SIGKILL,
    )


def test_cancel_escalates_to_sigkill_exactly_at_the_grace(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start(ScriptSpec(ignore_cancel=True))
    assert msup.cancel(unit.id, grace=3.0) is True
    clock.advance(2.999)
    msup.tick()
    # A tick's SIGKILL is queued before this ask, so the answer is exact.
    assert drive.signals(unit.id) == (signal.SIGTERM,)
    clock.advance(0.001)
    msup.tick()
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.reason, record.signal) == (
        Status.KILLED,
        Reason.CANCELLED,
        signal.SIGKILL,
    )


def test_a_unit_that_exits_after_its_cancel_is_still_killed(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start(ScriptSpec(ignore_cancel=True))
    msup.cancel(unit.id, grace=30)
    record = drive.exit(unit.id, 0)
    assert (record.status, record.reason, record.exit_code) == (
        Status.KILLED,
        Reason.CANCELLED,
        0,
    )


def test_a_timeout_is_exact_on_manual_time(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start(timeout=5)
    clock.advance(4.999)
    msup.tick()
    assert drive.signals(unit.id) == ()
    clock.advance(0.001)
    msup.tick()
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.reason) == (Status.KILLED, Reason.TIMEOUT)


@pytest.mark.parametrize("grace", [-1, float("nan"), "5", True, None])
def test_cancel_refuses_a_bad_grace(msup: Supervisor, drive: ScriptedDriver, grace: object) -> None:
    unit = drive.start()
    with pytest.raises(SpecError, match="grace"):
        msup.cancel(unit.id, grace=grace)  # type: ignore[arg-type]
    assert drive.signals(unit.id) == ()


def test_ending_a_parent_kills_its_running_children(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    parent = drive.start()
    child = drive.start(parent=parent.id)
    grandchild = drive.start(parent=child.id)
    done = drive.start(parent=parent.id)
    drive.exit(done.id, 0)
    drive.exit(parent.id, 0)
    for unit in (child, grandchild):
        record = msup.wait(unit.id, WAIT)
        assert (record.status, record.reason) == (Status.KILLED, Reason.PARENT_ENDED)
    assert msup.get(done.id).status == Status.COMPLETED
    # Units submitted at one instant of the manual clock list in ID order, not
    # submission order: pages are ordered by (created_at, id).
    children = sorted([msup.get(child.id), msup.get(done.id)], key=lambda r: r.id)
    assert msup.list(parent=parent.id) == children


def test_a_unit_cannot_be_started_under_an_ended_parent(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    parent = drive.start()
    drive.exit(parent.id, 0)
    with pytest.raises(SpecError, match="already ended"):
        drive.start(parent=parent.id)
    assert [r.id for r in msup.list()] == [parent.id]


# -- wait and result -------------------------------------------------------------


def test_result_of_each_ending(msup: Supervisor, drive: ScriptedDriver) -> None:
    ok, bad, broken, killed = (drive.start() for _ in range(4))
    assert drive.exit(ok.id, 0) == msup.result(ok.id)
    drive.exit(bad.id, 2)
    with pytest.raises(WorkFailed, match="exit code 2") as failed:
        msup.result(bad.id)
    assert failed.value.record.exit_code == 2
    drive.fail(broken.id, "Traceback ...\nValueError: bad input")
    with pytest.raises(WorkFailed, match="ValueError: bad input"):
        msup.result(broken.id)
    msup.kill(killed.id)
    with pytest.raises(WorkKilled, match="reason killed") as was_killed:
        msup.result(killed.id, timeout=WAIT)
    assert was_killed.value.record.reason == Reason.KILLED


def test_wait_and_result_raise_not_finished_after_the_timeout(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    with pytest.raises(NotFinished) as not_yet:
        msup.wait(unit.id, timeout=0.01)
    assert not_yet.value.record.status == Status.RUNNING
    assert isinstance(not_yet.value, TimeoutError)
    with pytest.raises(NotFinished):
        msup.result(unit.id, timeout=0)


def test_wait_wakes_when_another_thread_ends_the_unit(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()

    def end_once_waited_on() -> None:
        # End the unit only once the main thread is blocked in wait() for it.
        deadline = time.monotonic() + WAIT
        pause = threading.Event()
        while unit.id not in msup._waiters._waiters and time.monotonic() < deadline:
            pause.wait(0.001)
        drive.exit(unit.id, 0)

    ender = threading.Thread(target=end_once_waited_on)
    ender.start()
    record = msup.wait(unit.id, WAIT)
    ender.join(WAIT)
    assert record.status == Status.COMPLETED


def test_wait_async_and_result_async_do_not_block_the_loop(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    ok, doomed = drive.start(), drive.start()

    async def main() -> None:
        loop_alive = asyncio.Event()

        async def end_later() -> None:
            loop_alive.set()  # runs only if the waits below yield to the loop
            await asyncio.to_thread(drive.exit, ok.id, 0)
            await asyncio.to_thread(msup.kill, doomed.id)

        waiting = asyncio.gather(
            msup.wait_async(ok.id, timeout=WAIT), msup.result_async(doomed.id, timeout=WAIT)
        )
        ender = asyncio.create_task(end_later())
        with pytest.raises(WorkKilled):
            await waiting
        await ender
        assert loop_alive.is_set()
        record = await msup.wait_async(ok.id)
        assert record.status == Status.COMPLETED
        assert await msup.result_async(ok.id) == record

    asyncio.run(main())


def test_wait_async_raises_not_finished(msup: Supervisor, drive: ScriptedDriver) -> None:
    unit = drive.start()

    async def main() -> None:
        with pytest.raises(NotFinished):
            await msup.wait_async(unit.id, timeout=0.01)

    asyncio.run(main())
    assert not msup._waiters._waiters, "the async waiter was not cleaned up"


def test_list_filters_by_status_kind_and_parent(msup: Supervisor, drive: ScriptedDriver) -> None:
    parent, _unrelated, done = drive.start(), drive.start(), drive.start()
    child = drive.start(parent=parent.id)
    drive.exit(done.id, 3)
    assert {r.id for r in msup.list(status="failed")} == {done.id}
    assert {r.id for r in msup.list(status=Status.RUNNING, parent=parent.id)} == {child.id}
    assert len(msup.list(kind="scripted")) == 4
    with pytest.raises(SpecError, match="status must be one of"):
        msup.list(status="finished")


def test_a_handle_is_a_view_of_its_unit(msup: Supervisor, drive: ScriptedDriver) -> None:
    handle = drive.start()
    assert (repr(handle), str(handle)) == (f"<WorkHandle {handle.id}>", handle.id)
    drive.write(handle.id, b"out")
    assert handle.read_output() == b"out"
    assert handle.get() == msup.get(handle.id)
    with pytest.raises(NotFinished):
        handle.wait(timeout=0)
    assert handle.kill() is True
    assert handle.wait(WAIT).reason == Reason.KILLED
    assert handle.cancel() is False
    with pytest.raises(WorkKilled):
        handle.result()
    assert asyncio.run(handle.wait_async()).status == Status.KILLED
    assert list(handle.stream()) == []


# -- cancel and kill requests from other processes are answered at the unit's end --


def test_a_cancel_request_is_answered_when_the_unit_ends(
    msup: Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    unit = drive.start(ScriptSpec(ignore_cancel=True))
    with connect(msup.state_dir) as client:
        seq = client.request("cancel", unit.id, {"grace": 30.0})
        assert seq is not None
        msup.tick()  # applies the request: SIGTERM, which the unit ignores
        assert drive.signals(unit.id) == (signal.SIGTERM,)
        assert client.request_result(seq) is None  # no answer while it still runs
        clock.advance(30.0)
        msup.tick()  # the grace is over: SIGKILL
        assert client.request_result(seq, timeout=WAIT) == {"changed": True, "status": "killed"}


def test_a_cancel_request_the_unit_outran_is_answered_unchanged(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    # The unit exits 0 on its own after the request was made but before the
    # supervisor takes it up: the request changed nothing and must say so. (Once
    # the supervisor has accepted a cancel, the unit ends killed whatever its
    # process does next: tests/test_kinds.py, ...answered_true...)
    unit = drive.start()
    actor = msup._ask(rq.UnitActor(unit.id))
    with connect(msup.state_dir) as client:
        seq = client.request("cancel", unit.id)
        assert seq is not None
        actor.tell(ExitWith(0))
        assert msup.wait(unit.id, WAIT).status is Status.COMPLETED
        msup.tick()
        assert client.request_result(seq, timeout=WAIT) == {
            "changed": False,
            "status": "completed",
        }


def test_a_kill_request_is_answered_changed_once_the_unit_ended_killed(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start()
    with connect(msup.state_dir) as client:
        seq = client.request("kill", unit.id)
        assert seq is not None
        msup.tick()
        assert client.request_result(seq, timeout=WAIT) == {"changed": True, "status": "killed"}
        assert msup.get(unit.id).status is Status.KILLED
