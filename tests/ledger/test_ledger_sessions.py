"""Sessions, and finding the units a dead supervisor left running."""

from __future__ import annotations

import pytest

from tests.ledger.support import ManualClock, new_unit, raw, start
from workunits._core.errors import InvalidWorkId
from workunits._ledger import Ledger, LedgerCorrupt, LedgerError, UnitRow
from workunits._ledger.unreadable import Unreadable


def test_a_session_is_opened_beaten_and_closed(ledger: Ledger, clock: ManualClock) -> None:
    ledger.sessions.open("s00000001", 123)
    clock.advance(5)
    ledger.sessions.heartbeat("s00000001")
    session = ledger.sessions.get("s00000001")
    assert session is not None
    assert (session.pid, session.heartbeat_at - session.started_at) == (123, 5)
    ledger.sessions.close("s00000001")
    closed = ledger.sessions.get("s00000001")
    assert closed is not None
    assert closed.ended_at == clock.now()
    with pytest.raises(LedgerError, match="opened before"):
        ledger.sessions.open("s00000001", 124)
    with pytest.raises(LedgerError, match=r"open it first \(sessions.open\)"):
        ledger.sessions.heartbeat("s00000009")
    with pytest.raises(InvalidWorkId, match="not a session ID"):
        ledger.sessions.open("a00000001", 1)


def test_units_of_dead_sessions_are_the_running_units_of_other_sessions(
    ledger: Ledger, clock: ManualClock
) -> None:
    ledger.sessions.open("s00000001", 1)
    dead = start(ledger, new_unit(ledger).id, session="s00000001").id
    ended = start(ledger, new_unit(ledger).id, session="s00000001").id
    ledger.attempts.write(ended, attempt=1, status="completed")
    new_unit(ledger)  # pending: never started, nothing to resume
    ledger.sessions.open("s00000002", 2)
    mine = start(ledger, new_unit(ledger).id, session="s00000002").id
    assert [r.id for r in ledger.sessions.units_of_dead_sessions("s00000002")] == [dead]
    # Without the lock, a session heard from recently counts as live.
    clock.advance(10)
    ledger.sessions.heartbeat("s00000001")
    assert ledger.sessions.units_of_dead_sessions("s00000002", stale_after=30) == []
    clock.advance(31)
    assert [r.id for r in ledger.sessions.units_of_dead_sessions("s00000002", stale_after=30)] == [
        dead
    ]
    assert [s.id for s in ledger.sessions.live(stale_after=100)] == ["s00000001", "s00000002"]
    assert mine not in [r.id for r in ledger.sessions.units_of_dead_sessions("s00000002")]


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_taken_over_row_that_does_not_decode_is_unreadable_and_the_others_are_taken(
    ledger: Ledger, clock: ManualClock, exclusive: bool
) -> None:
    """Decoded row by row: the damaged one is handed back as an Unreadable naming it,
    moved to the new session with nothing else changed (a later takeover finds it)."""
    ledger.sessions.open("s00000001", 1)
    bad = start(ledger, new_unit(ledger, created_at=1.0).id, session="s00000001").id
    good = start(ledger, new_unit(ledger, created_at=2.0).id, session="s00000001").id
    with raw(ledger) as conn:
        conn.execute("UPDATE units SET parent = 'not-an-id' WHERE id = ?", (bad,))
    ledger.sessions.close("s00000001")
    ledger.sessions.open("s00000002", 2)
    won, rows = ledger.sessions.take_over("s00000002", exclusive=exclusive)
    assert won == ["s00000001"]
    (unreadable, row) = rows
    assert isinstance(unreadable, Unreadable)
    assert unreadable.row is None
    assert unreadable.id == bad
    assert isinstance(unreadable.error, LedgerCorrupt)
    assert f"unit {bad}: column parent holds 'not-an-id'" in str(unreadable.error)
    assert isinstance(row, UnitRow)
    assert row.id == good
    with raw(ledger) as conn:
        kept = conn.execute(
            "SELECT status, parent, session FROM units WHERE id = ?", (bad,)
        ).fetchone()
    assert tuple(kept) == ("running", "not-an-id", "s00000002")
