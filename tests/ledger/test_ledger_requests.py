"""Requests from other processes: appended, taken once, finished, reopened after a crash."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.ledger.support import read_line, send, spawn_all
from workunits._core.errors import SpecError
from workunits._ledger import Ledger, LedgerError, UnstorableValue


def test_a_request_is_taken_once_and_finished(ledger: Ledger) -> None:
    seq = ledger.requests.add("cancel", "a12345678", {"grace": 5.0})
    (request,) = ledger.requests.take(10, session="s00000001")
    assert (request.seq, request.verb, request.target, request.args) == (
        seq,
        "cancel",
        "a12345678",
        {"grace": 5.0},
    )
    assert request.taken_by == "s00000001"
    assert ledger.requests.take(10) == []
    ledger.requests.finish(seq, {"cancelled": True})
    done = ledger.requests.get(seq)
    assert done is not None
    assert done.result == {"cancelled": True}
    assert done.done_at is not None
    assert ledger.requests.get(seq + 1) is None


def test_requests_come_oldest_first_up_to_the_limit(ledger: Ledger) -> None:
    seqs = [ledger.requests.add("kill", "a12345678") for _ in range(5)]
    assert [r.seq for r in ledger.requests.take(3)] == seqs[:3]
    assert [r.seq for r in ledger.requests.take(3)] == seqs[3:]


def test_bad_requests_are_refused(ledger: Ledger) -> None:
    with pytest.raises(SpecError, match="'explode' is not a request verb"):
        ledger.requests.add("explode", "a12345678")
    with pytest.raises(ValueError, match="not a work unit ID"):
        ledger.requests.add("kill", "../etc")
    with pytest.raises(UnstorableValue, match="kill request"):
        ledger.requests.add("kill", "a12345678", {"why": {1, 2}})
    with pytest.raises(LedgerError, match="no taken request 99"):
        ledger.requests.finish(99)


def test_requests_a_dead_session_took_are_reopened(ledger: Ledger) -> None:
    first = ledger.requests.add("retain", "a12345678")
    second = ledger.requests.add("release", "a12345678")
    ledger.requests.take(10, session="s00000001")
    ledger.requests.finish(first)
    assert ledger.requests.reopen("s00000002") == 1
    assert [r.seq for r in ledger.requests.take(10, session="s00000002")] == [second]
    assert ledger.requests.reopen("s00000002") == 0


@pytest.mark.timeout(120)
def test_concurrent_takers_take_each_request_exactly_once(
    ledger: Ledger, state_dir: Path, ledger_url: str | None
) -> None:
    seqs = [ledger.requests.add("cancel", "a12345678", {"n": n}) for n in range(150)]
    argvs = [("take", str(state_dir), f"s0000000{n}") for n in range(4)]
    with spawn_all(argvs, ledger_url) as takers:
        for taker in takers:
            send(taker, "go")
        taken: list[int] = []
        for taker in takers:
            while (line := json.loads(read_line(taker))) != "done":
                taken.extend(line)
            assert taker.wait(60) == 0
    assert Counter(taken) == Counter(seqs)
