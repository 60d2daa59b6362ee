"""Queued units (``concurrency=``): kill and cancel before start, and deploys that hand work on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import upgrade_jobs
from tests.conftest import eventually
from tests.test_kinds import EchoWork
from workunits import Reason, SpecError, Status, Supervisor, WorkRecord, connect


@pytest.mark.parametrize("end", ["kill", "cancel"])
def test_ending_a_queued_unit_kills_it_without_running_it(tmp_path: Path, end: str) -> None:
    marker = tmp_path / "ran"
    with Supervisor(
        tmp_path / "state", concurrency={"shell": 1}, install_signal_handlers=False
    ) as sup:
        blocker = sup.shell(["sleep", "60"])
        queued = sup.shell(["touch", str(marker)])
        assert sup.get(queued.id).status is Status.PENDING  # the one slot is taken
        assert getattr(sup, end)(queued.id) is True
        record = sup.wait(queued.id, timeout=10)
        assert record.status is Status.KILLED
        assert record.started_at is None
        assert getattr(sup, end)(queued.id) is False  # ended: a no-op
        assert sup.kill(blocker.id) is True
        sup.wait(blocker.id, timeout=10)
        # The slot is free now; the killed unit must still never start.
        follower = sup.shell(["true"])
        assert sup.wait(follower.id, timeout=10).status is Status.COMPLETED
    assert not marker.exists()


def test_queued_units_start_in_order_as_slots_free(tmp_path: Path) -> None:
    with Supervisor(
        tmp_path / "state", concurrency={"shell": 1}, install_signal_handlers=False
    ) as sup:
        units = [sup.shell(f"echo {i}") for i in range(4)]
        records = [sup.wait(u.id, timeout=20) for u in units]
    assert [r.status for r in records] == [Status.COMPLETED] * 4
    starts = [r.started_at for r in records]
    ends = [r.ended_at for r in records]
    assert all(s is not None for s in starts)
    for prev_end, next_start in zip(ends, starts[1:], strict=False):
        assert prev_end is not None
        assert next_start is not None
        assert next_start >= prev_end  # one slot: never two at once


def most_at_once(records: list[WorkRecord]) -> int:
    """The most records whose [started_at, ended_at) overlap at one moment."""
    edges = []
    for r in records:
        assert r.started_at is not None
        assert r.ended_at is not None
        edges += [(r.started_at, 1), (r.ended_at, -1)]
    most = now = 0
    for _, step in sorted(edges):  # at a tie an end (-1) comes before a start (+1)
        now += step
        most = max(most, now)
    return most


@pytest.mark.timeout(60)
def test_a_backlog_behind_a_limit_runs_at_most_the_limit_and_ends_whole(tmp_path: Path) -> None:
    """The running count (``Units.running_of``) stays exact while a backlog drains,
    with queued and running units killed on the way and another kind beside it."""
    with Supervisor(
        tmp_path / "state", concurrency={"shell": 2}, install_signal_handlers=False
    ) as sup:
        blockers = [sup.shell(["sleep", "60"]) for _ in range(2)]
        backlog = [sup.shell("echo queued") for _ in range(24)]
        beside = sup.agent(abs, -3)  # another kind, no limit: starts at once
        assert sup.wait(beside.id, timeout=20).status is Status.COMPLETED
        assert all(sup.get(u.id).status is Status.PENDING for u in backlog)
        assert sup.kill(backlog[5].id) is True  # queued: never runs
        assert sup.kill(blockers[0].id) is True  # running: frees its place
        assert sup.kill(blockers[1].id) is True
        records = [sup.wait(u.id, timeout=30) for u in backlog]
    ran = [r for i, r in enumerate(records) if i != 5]
    assert [r.status for r in ran] == [Status.COMPLETED] * len(ran)
    assert records[5].status is Status.KILLED
    assert records[5].started_at is None
    assert most_at_once(ran) <= 2


@pytest.mark.timeout(120)
def test_a_deploy_hands_resumable_and_queued_units_to_the_next_supervisor(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = Supervisor(state, concurrency={"agent": 1}, install_signal_handlers=False)
    try:
        resumable = first.agent(upgrade_jobs.survive, 5)
        queued = first.agent(upgrade_jobs.done, 4)
        with connect(state) as client:
            eventually(lambda: client.row(resumable.id).checkpoint is not None, what="a checkpoint")
        assert first.get(queued.id).status is Status.PENDING
    finally:
        first.close(deploy=True)
    with connect(state) as client:
        assert client.get(resumable.id).status is Status.RUNNING  # handed on, not ended
        assert client.get(queued.id).status is Status.PENDING
    with Supervisor(state, install_signal_handlers=False) as second:
        record = second.wait(resumable.id, timeout=60)
        assert (record.status, record.attempt) == (Status.COMPLETED, 2)
        assert second.result(resumable.id) == {"attempt": 2, "checkpoint": {"value": 5}}
        assert second.result(queued.id) == 8
    assert record.reason is not Reason.LOST


@pytest.mark.parametrize("name", ["shells", "Shell", "x", "", 3])
def test_a_concurrency_cap_on_no_kind_is_refused_before_the_state_dir_is_made(
    tmp_path: Path, name: object
) -> None:
    # It would cap nothing: every shell would run at once under a typo.
    with pytest.raises(SpecError, match=r"concurrency names no kind of this supervisor") as exc:
        Supervisor(tmp_path / "state", concurrency={name: 1}, install_signal_handlers=False)  # type: ignore[dict-item]
    assert "kinds: ['agent', 'dream', 'monitor', 'remote', 'shell', 'teammate', 'workflow']" in str(
        exc.value
    )
    assert not (tmp_path / "state").exists()


def test_a_cap_by_letter_caps_its_kind(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "state", concurrency={"b": 1}, install_signal_handlers=False) as sup:
        blocker = sup.shell(["sleep", "60"])
        eventually(lambda: sup.get(blocker.id).status is Status.RUNNING)
        queued = sup.shell(["true"])
        assert sup.get(queued.id).status is Status.PENDING  # the one slot is taken
        sup.kill(blocker.id)
        assert sup.wait(queued.id, timeout=10).status is Status.COMPLETED


def test_a_kind_capped_by_name_and_letter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="caps the shell kind twice"):
        Supervisor(
            tmp_path / "state", concurrency={"b": 1, "shell": 2}, install_signal_handlers=False
        )


def test_a_users_kind_given_in_kinds_can_be_capped(tmp_path: Path) -> None:
    with Supervisor(
        tmp_path / "state",
        kinds={"e": EchoWork},
        concurrency={"echo": 1},
        install_signal_handlers=False,
    ) as sup:
        assert sup.wait(sup.submit("e", b"hi").id, timeout=10).status is Status.COMPLETED
