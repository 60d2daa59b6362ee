"""Submits from several threads of one process share fully synced commits (``submit_group``)."""

from __future__ import annotations

import operator
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.ledger.support import ManualClock
from workunits._core import ids
from workunits._core.errors import IdempotencyConflict, LedgerError, LedgerFull
from workunits._ledger import Call, Ledger, NewUnit, UnitRow
from workunits._ledger.sqlite.db import DB_FILE
from workunits._ledger.submit_group import SubmitGroup

pytestmark = pytest.mark.timeout(60)

THREADS = 8


def new(ledger: Ledger, *, key: str | None = None, args: tuple[int, ...] = (1, 2)) -> NewUnit:
    work_id = ids.mint("a")
    return NewUnit(
        work_id, "agent", ledger.units.encode_spec(Call(operator.add, args), work_id), 1.0, key=key
    )


@pytest.fixture
def sqlite_ledger(state_dir: Path, clock: ManualClock) -> Iterator[Ledger]:
    with Ledger(state_dir, clock=clock) as opened:
        yield opened


@contextmanager
def write_lock_held(ledger: Ledger) -> Iterator[None]:
    """Another connection holds SQLite's write lock: the first submit's commit waits."""
    other = sqlite3.connect(ledger.state_dir / DB_FILE, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def submit_at_once(
    ledger: Ledger, news: Sequence[NewUnit]
) -> list[tuple[UnitRow, bool] | BaseException]:
    """Each of ``news`` from a thread of its own, all queued behind one commit that waits."""
    answers: list[tuple[UnitRow, bool] | BaseException] = [LookupError("no answer")] * len(news)

    def one(i: int) -> None:
        try:
            answers[i] = ledger.units.submit(news[i])
        except BaseException as exc:  # noqa: BLE001 - the answer under test
            answers[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(news))]
    group: SubmitGroup = ledger.units._group
    with write_lock_held(ledger):
        for t in threads:
            t.start()
        # The first thread leads and waits for the lock; the others queue behind it.
        eventually(lambda: len(group._queue) == len(news) - 1, what="the others to queue")
    for t in threads:
        t.join(30)
    return answers


def test_threads_submitting_at_once_share_a_commit(sqlite_ledger: Ledger) -> None:
    news = [new(sqlite_ledger) for _ in range(THREADS)]
    sqlite_ledger.drain_commit_seconds()
    answers = submit_at_once(sqlite_ledger, news)
    # The leader commits itself alone; the seven that queued meanwhile share the next.
    assert len(sqlite_ledger.drain_commit_seconds()) == 2
    for unit, answer in zip(news, answers, strict=True):
        assert isinstance(answer, tuple), answer
        row, created = answer
        assert (row.id, created) == (unit.id, True)
        assert sqlite_ledger.units.require(unit.id).status.value == "pending"


def test_each_submit_of_a_group_keeps_its_own_answer(sqlite_ledger: Ledger) -> None:
    taken, _ = sqlite_ledger.units.submit(new(sqlite_ledger, key="taken"))
    news = [
        new(sqlite_ledger),  # the leader
        new(sqlite_ledger, key="taken", args=(5, 6)),  # the key with another spec
        new(sqlite_ledger, key="twice"),
        new(sqlite_ledger, key="twice"),  # the same key and spec, in the same group
        new(sqlite_ledger, key="taken"),  # the existing unit's own spec
    ]
    answers = submit_at_once(sqlite_ledger, news)
    assert isinstance(answers[0], tuple)
    assert answers[0][1] is True
    assert isinstance(answers[1], IdempotencyConflict)
    first, second = answers[2], answers[3]
    assert isinstance(first, tuple)
    assert isinstance(second, tuple)
    assert first[0].id == second[0].id  # one unit per key (invariant 12)
    assert sorted([first[1], second[1]]) == [False, True]
    assert isinstance(answers[4], tuple)
    assert (answers[4][0].id, answers[4][1]) == (taken.id, False)


def behind_a_waiting_commit(
    commit: Callable[[Sequence[NewUnit]], list[object]], units: Sequence[NewUnit]
) -> tuple[list[int], dict[str, object]]:
    """Submit ``units`` through a group over ``commit``, whose first call waits until the
    others have queued behind it: the sizes of its calls, and each unit's answer (what
    its submit returned, or the exception it raised)."""
    release = threading.Event()
    calls: list[int] = []

    def held(batch: Sequence[NewUnit]) -> list[object]:
        calls.append(len(batch))
        if len(calls) == 1:
            release.wait(30)
        return commit(batch)

    group = SubmitGroup(held)  # type: ignore[arg-type]
    outcomes: dict[str, object] = {}

    def one(unit: NewUnit) -> None:
        try:
            outcomes[unit.id] = group.submit(unit)
        except BaseException as exc:  # noqa: BLE001 - the answer under test
            outcomes[unit.id] = exc

    threads = [threading.Thread(target=one, args=(u,)) for u in units]
    threads[0].start()
    eventually(lambda: calls, what="the first commit")
    for t in threads[1:]:
        t.start()
    eventually(lambda: len(group._queue) == len(units) - 1, what="the others behind it")
    release.set()
    for t in threads:
        t.join(30)
    return calls, outcomes


def test_a_failed_commit_fails_every_submit_of_its_group_with_its_own_copy(
    sqlite_ledger: Ledger,
) -> None:
    def full(batch: Sequence[NewUnit]) -> list[object]:
        raise LedgerFull("the disk holding the ledger is full")

    calls, outcomes = behind_a_waiting_commit(full, [new(sqlite_ledger) for _ in range(3)])
    errors = list(outcomes.values())
    assert calls == [1, 2]
    assert len(errors) == 3
    assert all(isinstance(e, LedgerFull) for e in errors)
    assert len({id(e) for e in errors}) == 3  # one exception object per raising thread


def test_an_interrupted_leader_reraises_and_its_followers_are_told(
    sqlite_ledger: Ledger,
) -> None:
    def interrupted(batch: Sequence[NewUnit]) -> list[object]:
        if len(batch) == 1:
            return [(None, True)]
        raise KeyboardInterrupt

    first, second, third = (new(sqlite_ledger) for _ in range(3))
    calls, outcomes = behind_a_waiting_commit(interrupted, [first, second, third])
    assert calls == [1, 2]
    # The second leads the next group and is interrupted: it raises the interrupt
    # itself; the third, which it was writing, hears that it may not be written.
    kinds = sorted(type(outcomes[u.id]).__name__ for u in (second, third))
    assert kinds == ["KeyboardInterrupt", "LedgerError"]
    told = next(o for o in outcomes.values() if type(o) is LedgerError)
    assert "interrupted" in str(told)


def test_a_forked_child_is_told_not_left_waiting_for_its_parents_leader(
    sqlite_ledger: Ledger,
) -> None:
    # A leader of the parent's is mid-commit at the fork, holding the ledger's lock:
    # nothing in the child would ever release it or answer a submit queued behind it.
    leader = threading.Thread(target=sqlite_ledger.units.submit, args=(new(sqlite_ledger),))
    unit = new(sqlite_ledger)
    with write_lock_held(sqlite_ledger):
        leader.start()
        eventually(lambda: sqlite_ledger.units._group._leading, what="the leader to commit")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                sqlite_ledger.units.submit(unit)
            except LedgerError as exc:
                os._exit(0 if "fork" in str(exc) else 2)
            os._exit(3)
        status = None
        try:
            status = eventually(lambda: _exit_status(pid), 20, "the child's answer")
        finally:
            if status is None:  # it hung: it must not outlive the test
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    leader.join(30)
    assert status == "exit 0"


def _exit_status(pid: int) -> str | None:
    """How the child ``pid`` ended, once it has (it is reaped then); None while it runs."""
    reaped, status = os.waitpid(pid, os.WNOHANG)
    return None if reaped == 0 else f"exit {os.waitstatus_to_exitcode(status)}"


class Interrupted(Exception):
    """Raised in the main thread by a signal while it waits in a group."""


def test_a_waiting_submit_interrupted_by_a_signal_leaves_the_queue(
    sqlite_ledger: Ledger,
) -> None:
    # The main thread waits second in line, is interrupted, and must not be made the
    # next leader after it left: the submit behind it would wait for ever.
    group: SubmitGroup = sqlite_ledger.units._group
    main = threading.get_ident()
    later = new(sqlite_ledger)
    outcomes: list[tuple[UnitRow, bool]] = []
    led = threading.Event()  # a leader is committing: the main thread may queue

    def on_signal(signum: int, frame: object) -> None:
        raise Interrupted

    def conductor() -> None:
        other = sqlite3.connect(sqlite_ledger.state_dir / DB_FILE, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # the first submit's commit waits for this
            first = threading.Thread(target=sqlite_ledger.units.submit, args=(new(sqlite_ledger),))
            first.start()
            eventually(lambda: group._leading and not group._queue, what="a leader")
            led.set()
            eventually(lambda: len(group._queue) == 1, what="the main thread in line")
            behind = threading.Thread(
                target=lambda: outcomes.append(sqlite_ledger.units.submit(later))
            )
            behind.start()
            eventually(lambda: len(group._queue) == 2, what="a submit behind it")
            signal.pthread_kill(main, signal.SIGUSR1)
            eventually(lambda: len(group._queue) == 1, what="the main thread to leave")
            other.execute("ROLLBACK")
            first.join(30)
            behind.join(30)
        finally:
            other.close()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        helper = threading.Thread(target=conductor)
        helper.start()
        assert led.wait(30)
        with pytest.raises(Interrupted):
            sqlite_ledger.units.submit(new(sqlite_ledger))
        helper.join(40)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert [row.id for row, _ in outcomes] == [later.id]
    assert not group._leading
