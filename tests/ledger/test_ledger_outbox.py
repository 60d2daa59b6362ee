"""The outbox: every terminal row has its notice, even when the writer is SIGKILLed;
consumers see each (id, status) once."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledger.support import ManualClock, new_unit, raw, read_line, send, spawn, start
from workunits._core.errors import InvalidWorkId, LedgerCorrupt
from workunits._core.status import Status, is_terminal
from workunits._ledger import Ledger


def test_notices_wait_per_parent_until_marked(ledger: Ledger) -> None:
    parent = start(ledger, new_unit(ledger).id)
    child = start(ledger, new_unit(ledger, parent=parent.id).id)
    ledger.attempts.write(child.id, attempt=1, status="completed")
    assert [n.id for n in ledger.outbox.undelivered(parent.id)] == [child.id]
    assert ledger.outbox.undelivered(None) == []

    assert ledger.outbox.mark_delivered(child.id, Status.COMPLETED)
    assert not ledger.outbox.mark_delivered(child.id, Status.COMPLETED)  # the second caller lost
    assert ledger.outbox.undelivered(parent.id) == []


def test_a_parent_that_ends_acknowledges_its_childrens_notices(ledger: Ledger) -> None:
    # Nobody can take them once the parent's process is gone: the outbox stays bounded.
    parent = start(ledger, new_unit(ledger).id)
    early = start(ledger, new_unit(ledger, parent=parent.id).id)
    late = start(ledger, new_unit(ledger, parent=parent.id).id)
    ledger.attempts.write(early.id, attempt=1, status="completed")
    ledger.attempts.write(parent.id, attempt=1, status="failed")
    ledger.attempts.write(late.id, attempt=1, status="killed")  # ends after its parent
    assert ledger.outbox.undelivered(parent.id) == []
    assert [n.id for n in ledger.outbox.undelivered(None)] == [parent.id]
    assert ledger.outbox.size() == 1


def test_a_claimed_notice_goes_to_one_consumer_and_an_acknowledged_one_never_returns(
    ledger: Ledger,
) -> None:
    units = [start(ledger, new_unit(ledger).id) for _ in range(2)]
    for unit in units:
        ledger.attempts.write(unit.id, attempt=1, status="completed")
    first = ledger.outbox.claim(None)
    second = ledger.outbox.claim(None)
    assert first is not None
    assert second is not None
    assert {first.notice.id, second.notice.id} == {u.id for u in units}
    assert ledger.outbox.claim(None) is None  # both are held
    assert not first.notice.redelivered

    assert ledger.outbox.ack(first.notice.id, first.token)
    assert not ledger.outbox.ack(first.notice.id, first.token)  # once
    assert ledger.outbox.release(second.notice.id, second.token)
    again = ledger.outbox.claim(None)
    assert again is not None
    assert again.notice.id == second.notice.id
    assert again.notice.redelivered
    assert not ledger.outbox.ack(second.notice.id, second.token)  # the old claim is gone
    assert ledger.outbox.ack(again.notice.id, again.token)
    assert ledger.outbox.claim(None) is None
    assert ledger.outbox.size() == 0


def test_a_leased_claim_lapses_unless_renewed(ledger: Ledger, clock: ManualClock) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    held = ledger.outbox.claim(None, owner="lease:http-client-1", lease=10)
    assert held is not None
    clock.advance(8)
    assert ledger.outbox.renew(unit.id, held.token, 10)
    clock.advance(8)
    assert ledger.outbox.claim(None) is None  # renewed: still held
    clock.advance(3)
    taken = ledger.outbox.claim(None)
    assert taken is not None
    assert taken.notice.redelivered
    assert not ledger.outbox.ack(unit.id, held.token)


def test_a_leased_claim_holds_for_its_lease_and_no_longer(
    ledger: Ledger, clock: ManualClock
) -> None:
    # The first lease, unrenewed: kills a claim that drops it or counts it backwards.
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    held = ledger.outbox.claim(None, owner="lease:http-client-1", lease=10)
    assert held is not None
    clock.advance(9.9)
    assert ledger.outbox.claim(None) is None
    clock.advance(0.1)
    taken = ledger.outbox.claim(None)
    assert taken is not None
    assert taken.notice.redelivered


def test_a_claim_for_a_malformed_parent_is_refused(ledger: Ledger) -> None:
    with pytest.raises(InvalidWorkId):
        ledger.outbox.claim("../etc")


def test_acknowledged_among_answers_for_every_unit_asked_about(ledger: Ledger) -> None:
    # Several chunks of 500, each asked (with several marks), none twice.
    units = [start(ledger, new_unit(ledger).id) for _ in range(3)]
    for unit in units:
        ledger.attempts.write(unit.id, attempt=1, status="completed")
    first = ledger.outbox.claim(None)
    assert first is not None
    assert ledger.outbox.ack(first.notice.id, first.token)
    waiting = [u.id for u in units if u.id != first.notice.id]
    unknown = [f"a{n:08d}" for n in range(1100)]  # no notice: "already gone"
    asked = [*unknown, *waiting, first.notice.id]
    assert ledger.outbox.acknowledged_among(asked) == {*unknown, first.notice.id}
    assert (ledger.outbox.row_count(), ledger.outbox.size()) == (3, 2)


def test_a_claim_whose_process_died_is_released(
    ledger: Ledger, state_dir: Path, ledger_url: str | None
) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    code = (
        "import os, sys; from workunits._ledger import Ledger; "
        "url = sys.argv[2] or None; "
        "held = Ledger(sys.argv[1], ledger=url).outbox.claim(None); "
        "print(held.notice.id, flush=True); os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(state_dir), ledger_url or ""],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.strip() == unit.id
    taken = ledger.outbox.claim(None)
    assert taken is not None
    assert taken.notice.id == unit.id
    assert taken.notice.redelivered


def test_undelivered_notices_survive_a_reopen(
    ledger: Ledger, state_dir: Path, ledger_url: str | None
) -> None:
    units = [start(ledger, new_unit(ledger).id) for _ in range(3)]
    for unit in units:
        ledger.attempts.write(unit.id, attempt=1, status="completed")
    ledger.outbox.mark_delivered(units[0].id, Status.COMPLETED)
    ledger.close()
    with Ledger(state_dir, ledger=ledger_url) as reopened:
        assert [n.id for n in reopened.outbox.undelivered(None)] == [u.id for u in units[1:]]
        assert [n.id for n in reopened.outbox.undelivered(None, limit=1)] == [units[1].id]


@pytest.mark.timeout(120)
def test_sigkill_never_leaves_a_terminal_row_without_its_notice(
    state_dir: Path, ledger_url: str | None
) -> None:
    Ledger(state_dir, ledger=ledger_url).close()
    rng = random.Random(7)  # noqa: S311 - reproducible kill points, not a secret
    for _ in range(12):
        with spawn("crash-writer", str(state_dir), ledger_url=ledger_url) as writer:
            send(writer, "go")
            # Let it commit a random number of units, then kill it wherever it is.
            for _ in range(rng.randint(1, 25)):
                read_line(writer)
            writer.send_signal(signal.SIGKILL)
            assert writer.wait(30) == -signal.SIGKILL

    with Ledger(state_dir, ledger=ledger_url) as ledger, raw(ledger) as conn:
        if ledger_url is None:
            assert tuple(conn.execute("PRAGMA integrity_check").fetchone()) == ("ok",)
        units = {r[0]: r[1] for r in conn.execute("SELECT id, status FROM units")}
        notices = [(r[0], r[1]) for r in conn.execute("SELECT id, status FROM notifications")]
    terminal = {(i, s) for i, s in units.items() if is_terminal(Status(s))}
    assert len(terminal) >= 12
    assert len(notices) == len(set(notices))
    assert set(notices) == terminal


def test_a_dead_claim_is_released_by_a_claim_for_any_parent_or_the_periodic_sweep(
    ledger: Ledger, clock: ManualClock
) -> None:
    # A consumer of a parent's notices that dies must not hold them until someone
    # claims for that same parent: any claim, or the sweep, hands them back.
    parent = start(ledger, new_unit(ledger).id)
    children = [start(ledger, new_unit(ledger, parent=parent.id).id) for _ in range(2)]
    for child in children:
        ledger.attempts.write(child.id, attempt=1, status="completed")
    held = [ledger.outbox.claim(parent.id, owner="lease:gone", lease=5) for _ in children]
    assert all(h is not None for h in held)
    assert ledger.outbox.unclaimed_count(parent.id) == 0
    clock.advance(5)
    assert ledger.outbox.claim(None) is None  # the root has nothing of its own...
    assert ledger.outbox.unclaimed_count(parent.id) == 2  # ...but its claim released the child's
    again = ledger.outbox.claim(parent.id, owner="lease:gone-too", lease=5)
    assert again is not None
    assert again.notice.redelivered
    assert ledger.outbox.release_dead() == 0  # its lease runs
    clock.advance(5)
    assert ledger.outbox.release_dead() == 1
    assert ledger.outbox.unclaimed_count(parent.id) == 2


def test_a_corrupt_notice_is_reported_with_its_unit(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    with raw(ledger) as conn:
        conn.execute("UPDATE notifications SET payload = ? WHERE id = ?", (b"{}", unit.id))
    with pytest.raises(LedgerCorrupt, match=f"^unit {unit.id}: column notifications.payload"):
        ledger.outbox.undelivered(None)
    with pytest.raises(LedgerCorrupt, match=f"^unit {unit.id}: column notifications.payload"):
        ledger.outbox.claim(None)


def test_acknowledged_among_asks_about_the_ids_at_every_chunk_edge(ledger: Ledger) -> None:
    # Unread notices placed at the edges of the chunks of 500: kills a loop that
    # steps past an ID (a step of 501 over slices of 500 never asks about the 501st).
    waiting = []
    for _ in range(4):
        unit = start(ledger, new_unit(ledger).id)
        ledger.attempts.write(unit.id, attempt=1, status="completed")
        waiting.append(unit.id)
    asked = [f"a{n:08d}" for n in range(1200)]
    for index, work_id in zip((499, 500, 1000, 1001), waiting, strict=True):
        asked.insert(index, work_id)
    assert ledger.outbox.acknowledged_among(asked) == set(asked) - set(waiting)


def test_acknowledged_notices_are_deleted_once_older_than_asked_and_no_sooner(
    ledger: Ledger, clock: ManualClock
) -> None:
    units = [start(ledger, new_unit(ledger).id) for _ in range(2)]
    for unit in units:
        ledger.attempts.write(unit.id, attempt=1, status="completed")
    held = ledger.outbox.claim(None)
    assert held is not None
    assert ledger.outbox.ack(held.notice.id, held.token)
    clock.advance(10)
    assert ledger.outbox.drop_acknowledged(older_than=10) == 0  # exactly 10 s old: kept
    clock.advance(0.5)
    assert ledger.outbox.drop_acknowledged(older_than=10) == 1
    assert ledger.outbox.row_count() == 1  # the unread one stays, however old
    assert [n.id for n in ledger.outbox.undelivered(None)] == [
        u.id for u in units if u.id != held.notice.id
    ]
