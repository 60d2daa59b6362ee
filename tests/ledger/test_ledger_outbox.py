"""The outbox: every terminal row has its notice, even when the writer is SIGKILLed;
consumers see each (id, status) once."""

from __future__ import annotations

import random
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.ledger.support import new_unit, read_line, send, spawn, start
from workunits._ledger import Ledger
from workunits._status import Status, is_terminal


def test_notices_wait_per_parent_until_marked(ledger: Ledger) -> None:
    parent = start(ledger, new_unit(ledger).id)
    child = start(ledger, new_unit(ledger, parent=parent.id).id)
    ledger.write(child.id, attempt=1, status="completed")
    ledger.write(parent.id, attempt=1, status="failed")
    assert [n.id for n in ledger.undelivered(parent.id)] == [child.id]
    assert [n.id for n in ledger.undelivered(None)] == [parent.id]

    assert ledger.mark_delivered(child.id, Status.COMPLETED)
    assert not ledger.mark_delivered(child.id, Status.COMPLETED)  # the second caller lost
    assert ledger.undelivered(parent.id) == []


def test_undelivered_notices_survive_a_reopen(ledger: Ledger, state_dir: Path) -> None:
    units = [start(ledger, new_unit(ledger).id) for _ in range(3)]
    for unit in units:
        ledger.write(unit.id, attempt=1, status="completed")
    ledger.mark_delivered(units[0].id, Status.COMPLETED)
    ledger.close()
    with Ledger(state_dir) as reopened:
        assert [n.id for n in reopened.undelivered(None)] == [u.id for u in units[1:]]
        assert [n.id for n in reopened.undelivered(None, limit=1)] == [units[1].id]


@pytest.mark.timeout(120)
def test_sigkill_never_leaves_a_terminal_row_without_its_notice(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    Ledger(state_dir).close()
    rng = random.Random(7)  # noqa: S311 - reproducible kill points, not a secret
    for _ in range(12):
        with spawn("crash-writer", str(state_dir)) as writer:
            send(writer, "go")
            # Let it commit a random number of units, then kill it wherever it is.
            for _ in range(rng.randint(1, 25)):
                read_line(writer)
            writer.send_signal(signal.SIGKILL)
            assert writer.wait(30) == -signal.SIGKILL

    conn = sqlite3.connect(state_dir / "ledger.db")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    units = dict(conn.execute("SELECT id, status FROM units").fetchall())
    notices = conn.execute("SELECT id, status FROM notifications").fetchall()
    conn.close()
    terminal = {(i, s) for i, s in units.items() if is_terminal(Status(s))}
    assert len(terminal) >= 12
    assert len(notices) == len(set(notices))
    assert set(notices) == terminal
