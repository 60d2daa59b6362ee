"""Supervised teammates: ``restart=`` starts a crashed teammate again, same ID, next attempt.

Real processes throughout: a teammate crashes by a tell that raises or by
``os._exit``; its restart runs ``on_start`` again; the restart intensity ends
it ``failed`` (reason ``restart-intensity``) with one notice; asks meet the
restart and are answered or fail clearly; and a SIGKILLed supervisor's
teammate is restarted by the next one according to its stored policy.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu

from .conftest import eventually
from .kinds_support import Fifo, supervisor
from .restart_jobs import Phoenix

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with supervisor(tmp_path) as s:
        yield s


def starts_of(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def at_attempt(sup: wu.Supervisor, work_id: str, attempt: int) -> wu.WorkRecord:
    """Wait until the teammate runs ``attempt`` (its actor up, not between attempts)."""

    def check() -> wu.WorkRecord | None:
        r = sup.get(work_id)
        return r if r.attempt == attempt and r.retry_at is None else None

    return eventually(check, what=f"{work_id} to run attempt {attempt}")


@pytest.mark.parametrize("crash", ["crash", "exit"])
def test_a_permanent_teammate_comes_back_with_its_id_and_runs_on_start_again(
    sup: wu.Supervisor, tmp_path: Path, crash: str
) -> None:
    starts = tmp_path / "starts"
    mate = sup.teammate(Phoenix, str(starts), restart="permanent")
    assert mate.ask("attempt", timeout=30) == 1
    mate.tell(crash)

    record = at_attempt(sup, mate.id, 2)
    assert record.status == wu.Status.RUNNING
    assert mate.ask("attempt", timeout=30) == 2  # the same handle, the same ID
    assert starts_of(starts) == [1, 2]  # on_start ran again
    assert [a.attempt for a in record.attempts] == [1]
    why = record.attempts[0].describe()
    assert ("crashed on purpose" in why) if crash == "crash" else ("exit code 3" in why)
    assert record.restart is not None
    assert record.restart.mode == "permanent"
    assert mate.stop(timeout=30) is None  # a stop is asked for: not restarted
    assert sup.get(mate.id).status == wu.Status.COMPLETED


def test_transient_restarts_a_crash_but_not_a_stop_and_temporary_restarts_nothing(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    transient = sup.teammate(Phoenix, str(tmp_path / "t"), restart="transient")
    temporary = sup.teammate(Phoenix, str(tmp_path / "p"), restart="temporary")
    transient.tell("crash")
    temporary.tell("crash")

    assert at_attempt(sup, transient.id, 2).status == wu.Status.RUNNING
    ended = sup.wait(temporary.id, timeout=30)
    assert (ended.status, ended.attempt, ended.reason) == (wu.Status.FAILED, 1, None)
    assert ended.restart is None  # temporary is no policy at all: today's teammate
    assert starts_of(tmp_path / "p") == [1]

    transient.stop(timeout=30)
    stopped = sup.get(transient.id)
    assert (stopped.status, stopped.attempt) == (wu.Status.COMPLETED, 2)
    assert starts_of(tmp_path / "t") == [1, 2]


def test_more_restarts_than_the_intensity_allows_end_it_failed_with_one_notice(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    mailbox = sup.notifications()
    mate = sup.teammate(Phoenix, str(tmp_path / "s"), restart="permanent", max_restarts=2)
    for attempt in (1, 2, 3):
        at_attempt(sup, mate.id, attempt)
        mate.tell("crash")

    ended = sup.wait(mate.id, timeout=30)
    assert (ended.status, ended.reason, ended.attempt) == (
        wu.Status.FAILED,
        wu.Reason.RESTART_INTENSITY,
        3,
    )
    assert "more than 2 restarts within 60 s" in (ended.error or "")
    assert "crashed on purpose" in (ended.error or "")  # the last attempt's cause
    assert [a.attempt for a in ended.attempts] == [1, 2]
    assert starts_of(tmp_path / "s") == [1, 2, 3]
    notice = mailbox.get(timeout=10)
    assert notice.id == mate.id
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.2)  # none between attempts, one at the end
    with pytest.raises(wu.WorkFailed):
        sup.result(mate.id, timeout=1)


def test_an_ask_sent_while_it_restarts_is_answered_after_the_new_on_start(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    entered, gate = Fifo(tmp_path / "entered"), Fifo(tmp_path / "gate")
    try:
        mate = sup.teammate(
            Phoenix,
            str(tmp_path / "s"),
            entered.path,
            gate.path,
            2,
            restart="permanent",
        )
        mate.tell("crash")
        assert entered.wait(timeout=30) == "on_start"  # attempt 2 is inside on_start
        answer = mate.ask_future("attempt")
        assert not answer.done()
        gate.send("go")
        assert answer.result(timeout=30) == 2
    finally:
        entered.close()
        gate.close()


def test_asks_that_meet_a_restart_are_answered_or_fail_naming_it_never_hang(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    mate = sup.teammate(Phoenix, str(tmp_path / "s"), restart="permanent", max_restarts=50)
    outcomes: set[str] = set()
    for n in range(1, 9):
        at_attempt(sup, mate.id, n)
        mate.tell("crash")
        try:  # asked at once: held for the next attempt, or open when the crash came
            assert mate.ask("attempt", timeout=30) == n + 1
            outcomes.add("answered")
        except wu.TeammateRestarted as exc:
            outcomes.add("restarted" if f"{mate.id} restarted" in str(exc) else str(exc))
    assert outcomes <= {"answered", "restarted"}  # each one way or the other, in time
    assert sup.get(mate.id).status == wu.Status.RUNNING


def test_restart_keywords_are_checked(sup: wu.Supervisor, tmp_path: Path) -> None:
    with pytest.raises(wu.SpecError, match="restart must be one of"):
        sup.teammate(Phoenix, "x", restart="always")
    with pytest.raises(wu.SpecError, match="max_restarts"):
        sup.teammate(Phoenix, "x", restart="permanent", max_restarts=-1)
    with pytest.raises(wu.SpecError, match="within"):
        sup.teammate(Phoenix, "x", restart="transient", within=0)


def run_host(state: Path, starts: Path, max_restarts: int) -> str:
    """A supervisor whose permanent teammate crashed once, SIGKILLed at attempt 2."""
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.restart_host", str(state), str(starts), str(max_restarts)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        work_id: str = json.loads(host.stdout.readline())["id"]
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()
    return work_id


@pytest.mark.timeout(120)
def test_a_sigkilled_supervisor_s_teammate_is_restarted_and_the_intensity_carries_over(
    tmp_path: Path,
) -> None:
    state, starts = tmp_path / "state", tmp_path / "starts"
    work_id = run_host(state, starts, max_restarts=2)
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert work_id in sup.recovered["resumed"]
        mate = wu.TeammateHandle(sup, work_id)
        record = at_attempt(sup, work_id, 3)
        assert [a.attempt for a in record.attempts] == [1, 2]
        assert record.attempts[1].reason == wu.Reason.LOST
        assert mate.ask("attempt", timeout=30) == 3
        assert starts_of(starts) == [1, 2, 3]
        # Two restarts are already in the window (one by each supervisor): a third is too many.
        mate.tell("crash")
        ended = sup.wait(work_id, timeout=30)
        assert (ended.status, ended.reason) == (wu.Status.FAILED, wu.Reason.RESTART_INTENSITY)


@pytest.mark.timeout(120)
def test_a_sigkilled_supervisor_s_teammate_past_its_intensity_is_not_restarted(
    tmp_path: Path,
) -> None:
    state, starts = tmp_path / "state", tmp_path / "starts"
    work_id = run_host(state, starts, max_restarts=1)
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert work_id in sup.recovered["lost"]
        ended = sup.get(work_id)
        assert (ended.status, ended.reason, ended.attempt) == (
            wu.Status.FAILED,
            wu.Reason.RESTART_INTENSITY,
            2,
        )
        assert starts_of(starts) == [1, 2]
        notice = sup.notifications().get(timeout=10)
        assert notice.id == work_id
