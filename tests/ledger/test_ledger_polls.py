"""A supervisor's polls (requests, signals, pending units to claim) skip their read while
the ledger has not changed since they found nothing, and never miss what comes after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workunits._ledger import Ledger, UnitRow
from workunits._ledger.unreadable import Unreadable

from .support import ManualClock, new_unit, raw, start

SESSION = "s00000001"


@pytest.fixture
def other(
    state_dir: Path, clock: ManualClock, ledger: Ledger, ledger_url: str | None
) -> Iterator[Ledger]:
    """Another connection to the same ledger: what a CLI or a client process writes through."""
    with Ledger(state_dir, clock=clock, expire_after=100.0, ledger=ledger_url) as opened:
        yield opened


def test_each_poll_finds_what_another_process_commits_after_it_found_nothing(
    ledger: Ledger, other: Ledger
) -> None:
    for _ in range(2):  # the second finds nothing without reading (SQLite)
        assert ledger.requests.take(10, session=SESSION) == []
        assert ledger.signals.after(0) == []
        assert ledger.claims.claim(SESSION, {}, 10) == []

    seq = other.requests.add("kill", "a12345678")
    assert [r.seq for r in ledger.requests.take(10, session=SESSION)] == [seq]

    pending = new_unit(other)
    assert [r.id for r in ledger.claims.claim(SESSION, {}, 10)] == [pending.id]

    running = start(other, new_unit(other).id)
    sent = other.signals.send(running.id, "go", 1)
    assert [s.seq for s in ledger.signals.after(0)] == [sent]


def test_a_poll_reads_again_after_a_write_of_its_own_connection(ledger: Ledger) -> None:
    assert ledger.requests.take(10, session=SESSION) == []
    assert ledger.claims.claim(SESSION, {}, 10) == []
    # Written through the poller's own connection (SQLite's data_version does not count
    # these: the ledger counts them itself).
    seq = ledger.requests.add("cancel", "a12345678")
    assert [r.seq for r in ledger.requests.take(10, session=SESSION)] == [seq]
    pending = new_unit(ledger)
    assert [r.id for r in ledger.claims.claim(SESSION, {}, 10)] == [pending.id]


def test_a_poll_asked_differently_reads(ledger: Ledger, other: Ledger) -> None:
    running = start(other, new_unit(other).id)
    sent = [_sent(other, running.id, n) for n in range(3)]
    assert [s.seq for s in ledger.signals.after(0, limit=2)] == sent[:2]
    assert [s.seq for s in ledger.signals.after(sent[1], limit=2)] == sent[2:]
    assert ledger.signals.after(sent[2], limit=2) == []
    assert [s.seq for s in ledger.signals.after(sent[0], limit=2)] == sent[1:]  # another poll
    # What a poll found is found again: only finding nothing is remembered.
    assert [s.seq for s in ledger.signals.after(sent[0], limit=2)] == sent[1:]
    pending = new_unit(other)
    assert ledger.claims.claim(SESSION, {"agent": 0}, 10) == []  # no slot for an agent
    assert [r.id for r in ledger.claims.claim(SESSION, {"agent": 1}, 10)] == [pending.id]


@pytest.mark.sqlite_only
def test_a_poll_that_found_nothing_reads_nothing_until_the_ledger_changes(
    ledger: Ledger, other: Ledger
) -> None:
    statements: list[str] = []
    ledger._db.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    def reads() -> list[str]:
        found = [s for s in statements if "SELECT" in s.upper()]
        statements.clear()
        return found

    def poll() -> None:
        assert ledger.requests.take(10, session=SESSION) == []
        assert ledger.signals.after(0) == []
        assert ledger.claims.claim(SESSION, {}, 10) == []

    poll()
    assert reads(), "the first polls read the ledger"
    poll()
    assert reads() == [], "nothing changed: nothing read"
    statements.clear()
    other.requests.add("kill", "a12345678")  # another connection commits
    assert [r.target for r in ledger.requests.take(10, session=SESSION)] == ["a12345678"]
    assert reads(), "after another connection's commit, the poll reads"


def _sent(ledger: Ledger, work_id: str, value: int) -> int:
    seq = ledger.signals.send(work_id, "go", value)
    assert seq is not None
    return seq


def test_a_pending_row_that_does_not_decode_is_claimed_once_and_leaves_the_queue(
    ledger: Ledger, other: Ledger
) -> None:
    """Left in the queue it would be the oldest pending row for ever: it would take the
    one slot of every claim, and every look would find work to claim."""
    bad = new_unit(other, created_at=1.0).id
    good = new_unit(other, created_at=2.0).id
    with raw(other) as conn:
        conn.execute("UPDATE units SET parent = 'not-an-id' WHERE id = ?", (bad,))
    (first,) = ledger.claims.claim(SESSION, {"agent": 1}, 10)
    assert isinstance(first, Unreadable)
    assert first.id == bad
    assert first.row is None
    assert "column parent holds 'not-an-id'" in str(first.error)
    (second,) = ledger.claims.claim(SESSION, {"agent": 1}, 10)
    assert isinstance(second, UnitRow)
    assert second.id == good
    assert ledger.claims.claim(SESSION, {"agent": 1}, 10) == []
    with raw(other) as conn:
        kept = conn.execute(
            "SELECT status, parent, session FROM units WHERE id = ?", (bad,)
        ).fetchone()
    assert tuple(kept) == ("pending", "not-an-id", SESSION)
