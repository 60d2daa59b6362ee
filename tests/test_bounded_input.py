"""Numbers the ledger keeps and sizes the API reads are checked before anything is written.

An attempt count too large for the ledger's integer columns used to reach the
group commit and fail it, and with it every submit that arrived beside it; a
retry policy's NaN delay was stored as JSON null; ``events(max_bytes="x")``
and ``tree([])`` raised TypeError from inside.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.helpers import WAIT
from workunits._core.retry import MAX_ATTEMPTS
from workunits._ledger import submits as ledger_submits

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("bad", [0, MAX_ATTEMPTS + 1, 10**30, True, 2.0, "3"])
def test_an_attempt_count_beyond_the_ledger_is_refused_before_the_submit(
    sup: wu.Supervisor, bad: Any
) -> None:
    with pytest.raises(wu.SpecError, match=f"max_attempts must be an int from 1 to {MAX_ATTEMPTS}"):
        sup.agent(abs, -1, max_attempts=bad)
    with pytest.raises(wu.SpecError, match=r"Retry\(max_attempts=\) must be an int from 1"):
        wu.Retry(max_attempts=bad)
    assert sup.list() == []


def test_the_largest_attempt_count_is_kept(sup: wu.Supervisor) -> None:
    handle = sup.agent(abs, -2, max_attempts=MAX_ATTEMPTS)
    assert sup.result(handle.id, timeout=WAIT) == 2


def test_a_refused_submit_costs_the_submits_beside_it_nothing(sup: wu.Supervisor) -> None:
    """Eight threads submit at once (their submits share commits); one asks for too much."""
    start = threading.Barrier(8)
    made: list[str] = []
    refused: list[Exception] = []
    lock = threading.Lock()

    def submit(n: int) -> None:
        start.wait(timeout=WAIT)
        try:
            handle = sup.agent(abs, -n, max_attempts=10**30 if n == 3 else 2)
        except wu.SpecError as exc:
            with lock:
                refused.append(exc)
        else:
            with lock:
                made.append(handle.id)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(refused) == 1
    assert len(made) == 7
    assert sorted(sup.result(work_id, timeout=WAIT) for work_id in made) == [0, 1, 2, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("initial", math.nan),
        ("initial", math.inf),
        ("initial", -1),
        ("max_delay", math.nan),
        ("max_delay", math.inf),
        ("max_delay", "5"),
    ],
)
def test_a_retry_policy_refuses_a_delay_json_cannot_keep(field: str, bad: Any) -> None:
    with pytest.raises(
        wu.SpecError, match=rf"Retry\({field}=\) must be a finite number of seconds"
    ):
        wu.Retry(**{field: bad})


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.5, True, "2"])
def test_a_retry_policy_refuses_a_backoff_that_is_no_factor(bad: Any) -> None:
    with pytest.raises(wu.SpecError, match=r"Retry\(backoff=\) must be a finite number >= 1"):
        wu.Retry(backoff=bad)


@pytest.mark.parametrize("bad", [0, -1, "x", True, 1.5])
def test_events_refuse_a_bad_size(sup: wu.Supervisor, bad: Any) -> None:
    unit = sup.shell(["true"])
    with pytest.raises(wu.SpecError, match="max_bytes must be a positive int of bytes"):
        sup.events(unit.id, max_bytes=bad)
    with pytest.raises(wu.SpecError, match="max_bytes must be a positive int of bytes"):
        sup.read_output(unit.id, max_bytes=bad)


@pytest.mark.parametrize("bad", [[], "not an id", 7])
def test_a_tree_of_something_that_is_no_id_says_so(sup: wu.Supervisor, bad: Any) -> None:
    with pytest.raises(wu.InvalidWorkId):
        sup.tree(bad)


@pytest.mark.parametrize("bad", [(256,), (-1,), (10**30,), (True,), ("3",)])
def test_a_retry_policy_retries_only_exit_statuses(sup: wu.Supervisor, bad: Any) -> None:
    with pytest.raises(wu.SpecError, match=r"Retry\(exit_codes=\) must be exit statuses"):
        sup.shell(["true"], retry=wu.Retry(exit_codes=bad))
    assert sup.list() == []


def test_a_group_commit_that_one_row_fails_lands_the_others_one_at_a_time(
    sup: wu.Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a row holds that its ledger refuses (a case no check foresaw, injected
    here), the submits that shared its commit are written and only it fails."""
    gate_entered, gate = threading.Event(), threading.Event()
    real_insert = ledger_submits.insert

    def insert(conn: Any, new: Any, digest: str) -> Any:
        if new.description == "gate":  # holds the supervisor while the others queue
            gate_entered.set()
            assert gate.wait(WAIT)
        if new.description == "poison":
            raise RuntimeError("a row this ledger refuses")
        return real_insert(conn, new, digest)

    monkeypatch.setattr(ledger_submits, "insert", insert)
    first = threading.Thread(target=lambda: sup.shell(["true"], description="gate"))
    first.start()
    assert gate_entered.wait(WAIT)
    made: list[str] = []
    refused: list[BaseException] = []

    def submit(n: int) -> None:
        try:
            made.append(sup.shell(["true"], description="poison" if n == 3 else f"u{n}").id)
        except RuntimeError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    inbox = sup._machinery._ref.actor_inbox
    assert isinstance(inbox, queue.Queue)  # a ThreadingActor's
    eventually(lambda: inbox.qsize() >= 8, WAIT, "the eight submits queued behind the gate")
    gate.set()  # they are handled together: one group, one commit, which the poison fails
    for thread in [first, *threads]:
        thread.join(WAIT)
    assert [str(e) for e in refused] == ["a row this ledger refuses"]
    assert len(made) == 7
    for work_id in made:
        assert sup.wait(work_id, timeout=WAIT).status is wu.Status.COMPLETED
