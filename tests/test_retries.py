"""Retries in real processes: a failed attempt runs again, same ID, and the unit stays running.

Between attempts there is no status change and no notice (invariant 2): the
one notice comes at the final end (invariant 11). Each attempt's writes are
fenced by its number (invariant 13). Time is a ManualClock: the backoff passes
when the test says so, and each wait is on the unit's own state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import workunits as wu
from workunits._ledger import Ledger
from workunits.testing import ManualClock

from .conftest import eventually
from .retry_jobs import (
    Flaky,
    child_then_fail,
    children_with_options,
    fail_until,
    go_quiet,
    raise_value_error,
    start_a_keyed_child,
)


def waiting(sup: wu.Supervisor, work_id: str, attempt: int) -> wu.WorkRecord:
    """The unit once its ``attempt`` failed and it waits for the next one."""

    def check() -> wu.WorkRecord | None:
        record = sup.get(work_id)
        done = record.retry_at is not None and record.attempt == attempt
        return record if done or wu.is_terminal(record.status) else None

    return eventually(check, what=f"attempt {attempt} of {work_id} to fail")


def test_a_failed_attempt_runs_again_with_the_same_id_and_one_notice_at_the_end(
    msup: wu.Supervisor, clock: ManualClock
) -> None:
    policy = wu.Retry(max_attempts=3, initial=4.0, backoff=2.0, jitter=False)
    unit = msup.agent(fail_until, 3, retry=policy)
    mailbox = msup.notifications()

    first = waiting(msup, unit.id, 1)
    assert first.status == wu.Status.RUNNING  # not a status change
    assert first.progress_message == "retry 2/3 in 4.0 s"
    assert first.retry_at == pytest.approx(clock.now() + 4.0)
    assert [a.attempt for a in first.attempts] == [1]
    assert "Flaky: attempt 1 is not good enough" in (first.attempts[0].error or "")
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.05)  # no notice between attempts

    clock.advance(3.9)
    msup.tick()
    assert msup.get(unit.id).attempt == 1  # not yet due
    clock.advance(0.1)
    msup.tick()
    second = waiting(msup, unit.id, 2)
    assert second.progress_message == "retry 3/3 in 8.0 s"  # initial * backoff
    clock.advance(8.0)
    msup.tick()

    assert msup.result(unit.id, timeout=30) == 3
    record = msup.get(unit.id)
    assert (record.status, record.attempt) == (wu.Status.COMPLETED, 3)
    assert [a.attempt for a in record.attempts] == [1, 2]
    notice = mailbox.get(timeout=10)
    assert (notice.id, getattr(notice, "status", None)) == (unit.id, wu.Status.COMPLETED)
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.1)


def test_the_last_attempt_s_failure_is_the_unit_s_end(
    msup: wu.Supervisor, clock: ManualClock
) -> None:
    unit = msup.agent(fail_until, 5, retry=wu.Retry(max_attempts=2, initial=1.0, jitter=False))
    waiting(msup, unit.id, 1)
    clock.advance(1.0)
    msup.tick()
    record = msup.wait(unit.id, timeout=30)
    assert (record.status, record.attempt, len(record.attempts)) == (wu.Status.FAILED, 2, 1)
    assert "attempt 2 is not good enough" in (record.error or "")
    with pytest.raises(wu.WorkFailed):
        msup.result(unit.id)


@pytest.mark.parametrize("key", ["the-child", None])
def test_a_later_attempt_gets_the_child_its_key_names(sup: wu.Supervisor, key: str | None) -> None:
    unit = sup.agent(start_a_keyed_child, key, retry=wu.Retry(initial=0.01, jitter=False))
    (child,) = sup.result(unit.id, timeout=60)
    children = [r.id for r in sup.list(parent=unit.id)]
    if key is None:  # each attempt started its own
        assert len(children) == 2
        assert child in children
    else:  # the second attempt found the first attempt's child, and started none
        assert children == [child]


def test_a_child_takes_retry_stall_after_and_not_before(sup: wu.Supervisor, tmp_path: Path) -> None:
    unit = sup.agent(children_with_options, str(tmp_path / "gate"))
    assert sup.result(unit.id, timeout=60) == {
        "flaky": 2,  # its first attempt failed, its retry completed
        "stalled": True,  # the parent got the quiet child's StallEvent
        "quiet": "went on",
        "held": "pending",  # not before an hour from now
    }


def test_two_parents_may_give_their_children_one_key(sup: wu.Supervisor) -> None:
    # Keys are scoped to the parent: neither gets the other's child.
    policy = wu.Retry(initial=0.01, jitter=False)
    units = [sup.agent(start_a_keyed_child, "fetch", retry=policy) for _ in "ab"]
    children = [sup.result(u.id, timeout=60)[0] for u in units]
    assert len(set(children)) == 2
    for unit, child in zip(units, children, strict=True):
        assert sup.get(child).parent == unit.id


def test_only_the_exceptions_the_policy_names_are_retried(msup: wu.Supervisor) -> None:
    unit = msup.agent(raise_value_error, retry=wu.Retry(on=(Flaky,), initial=0.0))
    record = msup.wait(unit.id, timeout=30)
    assert (record.status, record.attempt, record.attempts) == (wu.Status.FAILED, 1, ())


def test_a_shell_is_retried_by_exit_code_and_its_output_runs_on(
    msup: wu.Supervisor, clock: ManualClock
) -> None:
    policy = wu.Retry(max_attempts=2, initial=1.0, exit_codes=(3,), jitter=False)
    unit = msup.shell("echo run; exit 3", retry=policy)
    assert waiting(msup, unit.id, 1).attempts[0].exit_code == 3
    clock.advance(1.0)
    msup.tick()
    record = msup.wait(unit.id, timeout=30)
    assert (record.status, record.exit_code, record.attempt) == (wu.Status.FAILED, 3, 2)
    assert record.output_tail == b"run\nrun\n"  # the second attempt appended


def test_an_exit_code_the_policy_does_not_name_ends_the_shell(msup: wu.Supervisor) -> None:
    unit = msup.shell("exit 4", retry=wu.Retry(exit_codes=(3,), initial=0.0))
    record = msup.wait(unit.id, timeout=30)
    assert (record.status, record.attempt) == (wu.Status.FAILED, 1)


def test_a_kill_between_attempts_ends_the_unit_at_once_with_one_notice(
    msup: wu.Supervisor,
) -> None:
    unit = msup.agent(fail_until, 3, retry=wu.Retry(initial=100.0, jitter=False))
    mailbox = msup.notifications()
    waiting(msup, unit.id, 1)
    assert msup.kill(unit.id) is True
    record = msup.get(unit.id)
    assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
    assert mailbox.get(timeout=10).id == unit.id
    with pytest.raises(wu.NoNotification):
        mailbox.get(timeout=0.1)
    msup.tick()  # the retry that was due later finds the unit ended
    assert msup.get(unit.id).status == wu.Status.KILLED


def test_a_write_of_the_failed_attempt_is_refused_once_the_next_began(
    msup: wu.Supervisor, clock: ManualClock, state_dir: Path
) -> None:
    unit = msup.agent(fail_until, 2, retry=wu.Retry(initial=1.0, jitter=False))
    waiting(msup, unit.id, 1)
    clock.advance(1.0)
    msup.tick()
    assert msup.result(unit.id, timeout=30) == 2
    with Ledger(state_dir.with_name("manual-state")) as ledger:
        row = ledger.units.require(unit.id)
        assert (row.attempt, [a.attempt for a in row.attempts]) == (2, [1])
        with pytest.raises(wu.StaleAttempt):
            ledger.attempts.save_checkpoint(unit.id, 1, {"from": "the failed attempt"})


def test_max_attempts_and_a_policy_that_disagree_are_refused(msup: wu.Supervisor) -> None:
    with pytest.raises(wu.SpecError, match="one counter"):
        msup.agent(fail_until, 1, max_attempts=2, retry=wu.Retry(max_attempts=5))
    assert msup.list() == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff": 0.5}, "backoff"),
        ({"initial": -1}, "initial"),
        ({"on": (int,)}, "exception types"),
        ({"exit_codes": ("3",)}, "exit_codes"),
    ],
)
def test_a_bad_policy_says_what_is_wrong(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(wu.SpecError, match=message):
        wu.Retry(**arguments)  # type: ignore[arg-type]


def test_backoff_grows_to_its_cap_and_jitter_stays_below_it() -> None:
    fixed = wu.Retry(initial=1.0, backoff=2.0, max_delay=5.0, jitter=False)
    assert [fixed.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    jittered = wu.Retry(initial=1.0, backoff=2.0, max_delay=5.0, jitter=True)
    assert all(0.0 <= jittered.delay(n) <= 5.0 for n in range(1, 20))
    assert wu.Retry.from_json(fixed.to_json()) == wu.Retry(
        initial=1.0, backoff=2.0, max_delay=5.0, jitter=False, on=("builtins:Exception",)
    )


@pytest.mark.parametrize("take_in_first", [False, True], ids=["left", "taken"])
def test_a_later_attempt_sees_the_end_of_a_child_an_earlier_attempt_started(
    sup: wu.Supervisor, take_in_first: bool
) -> None:
    """Its ``wait`` returns at once; a notice attempt 1 left untaken comes again, marked
    redelivered, and one it took does not."""
    policy = wu.Retry(max_attempts=2, initial=0.01, jitter=False)
    unit = sup.agent(child_then_fail, take_in_first, retry=policy)
    expected = None if take_in_first else [True, True]
    assert sup.result(unit.id, timeout=60) == {"waited": "completed", "notice": expected}


def test_a_clients_submit_takes_retry_and_stall_after(sup: wu.Supervisor, tmp_path: Path) -> None:
    """Issue 17's options on every submit: through the ledger client too."""
    gate = tmp_path / "gate"
    with wu.connect(sup.state_dir) as client:
        flaky = client.agent(fail_until, 2, retry=wu.Retry(initial=0.01, jitter=False))
        quiet = client.agent(go_quiet, str(gate), stall_after=0.2)
        assert client.result(flaky.id, timeout=60) == 2
        assert client.row(flaky.id).attempt == 2
        stalls = sup.notifications()
        while not isinstance(event := stalls.get(timeout=30), wu.StallEvent):
            pass  # the flaky unit's notice comes first, or not
        assert event.id == quiet.id
        gate.write_text("went on")
        assert client.result(quiet.id, timeout=60) == "went on"
        with pytest.raises(wu.SpecError, match="disagree"):
            client.agent(fail_until, 2, max_attempts=2, retry=wu.Retry(max_attempts=3))
