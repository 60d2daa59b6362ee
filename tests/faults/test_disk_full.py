"""A full disk under the state dir loses no end (invariant 14).

An end whose ledger write fails is kept and retried every tick: until it lands
the record shows as not durable, waits and queued starts hold back, no notice
goes out; once there is room the ends land, each notice comes once, and the
next supervisor runs nothing again. A submit on a full disk fails at once,
with LedgerFull. One unit's writes land in the order they were made. Each
test runs on a real tmpfs (root) and under SQLite's page limit (anywhere):
both give a real SQLITE_FULL (see ``tests.faults.diskfull``).
"""

from __future__ import annotations

import functools
import logging
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.faults.diskfull import Filler, PageLimitFull, TmpfsFull, ledger_of, tmpfs
from tests.ledger.support import new_unit
from workunits import Status
from workunits._ledger import Ledger, Write
from workunits.supervisor.actor import ledger_mirror as durable
from workunits.supervisor.actor.failed_writes import FailedWrites, Pending


@pytest.fixture(params=["tmpfs", "page-limit"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Filler]]:
    """(state dir, filler): on a tmpfs mounted for the test, or under a page limit."""
    if request.param == "page-limit":
        yield tmp_path / "state", PageLimitFull()
        return
    with tmpfs(tmp_path / "tiny", "8m") as point:
        yield point / "state", TmpfsFull(point)


def _unit(sup: wu.Supervisor, runs: Path, go: Path, output_bytes: int) -> str:
    """A shell unit that restarts if lost, counts its runs, and ends once ``go`` exists."""
    script = (
        f"head -c {output_bytes} /dev/zero | tr '\\0' x; "
        f"echo ran >> {shlex.quote(str(runs))}; "
        f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.02; done"
    )
    return sup.shell(script, on_lost="restart").id


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _drain(mailbox: wu.Mailbox) -> list[str]:
    ids = []
    while (item := mailbox.get_nowait()) is not None:
        assert isinstance(item, wu.Notification)
        ids.append(item.id)
    return ids


@pytest.mark.timeout(120)
def test_ends_on_a_full_disk_land_once_there_is_room_and_never_run_again(
    disk: tuple[Path, Filler], tmp_path: Path
) -> None:
    state, filler = disk
    runs, go = tmp_path / "runs", tmp_path / "go"
    with (
        wu.Supervisor(state, install_signal_handlers=False, concurrency={"shell": 2}) as sup,
        wu.connect(state) as client,
    ):
        inbox = sup.notifications()
        first = [_unit(sup, runs, go, filler.output_bytes) for _ in range(2)]
        queued = _unit(sup, runs, go, filler.output_bytes)  # waits for a slot
        eventually(lambda: _runs(runs) == 2, what="both units to run")
        filler.fill(ledger_of(sup))
        go.touch()

        def ended_in_memory() -> bool:
            return all(sup.get(w).status == Status.COMPLETED for w in first)

        eventually(ended_in_memory, what="the units to end in memory")
        for work_id in first:
            assert sup.get(work_id).durable is False
            assert client.get(work_id).status == Status.RUNNING  # the ledger's view
            with pytest.raises(wu.NotFinished, match="not written to the ledger"):
                sup.wait(work_id, timeout=0.3)  # nobody hears of an end not durable
        assert _drain(inbox) == []
        assert sup.get(queued).status == Status.PENDING  # its start waits for the ends
        assert _runs(runs) == 2
        with pytest.raises(wu.LedgerFull, match="full"):  # a submit is refused, not kept
            sup.shell("true", description="a row that needs new pages " * 1000)

        filler.free(ledger_of(sup))
        for work_id in [*first, queued]:
            record = sup.wait(work_id, timeout=30)
            assert (record.status, record.durable) == (Status.COMPLETED, True)
            assert client.get(work_id).status == Status.COMPLETED
        assert sorted(_drain(inbox)) == sorted([*first, queued])
        assert _drain(inbox) == []
    assert _runs(runs) == 3

    with wu.Supervisor(state, install_signal_handlers=False) as again:
        assert again.recovered["resumed"] == []
        assert _drain(again.notifications()) == []  # each notice was delivered once
        assert all(again.get(w).status == Status.COMPLETED for w in [*first, queued])
    assert _runs(runs) == 3  # nothing ran twice


@pytest.mark.timeout(60)
def test_close_on_a_full_disk_says_what_it_could_not_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable, "CLOSE_RETRY_FOR", 0.5)
    filler = PageLimitFull()
    runs, go = tmp_path / "runs", tmp_path / "go"
    with caplog.at_level(logging.WARNING, logger="workunits"):
        sup = wu.Supervisor(tmp_path / "state", install_signal_handlers=False)
        try:
            work_id = _unit(sup, runs, go, filler.output_bytes)
            eventually(lambda: _runs(runs) == 1, what="the unit to run")
            filler.fill(ledger_of(sup))
            go.touch()
            eventually(lambda: sup.get(work_id).status == Status.COMPLETED, what="its end")
        finally:
            sup.close()
    messages = [r.getMessage() for r in caplog.records]
    failures = [m for m in messages if f"could not record the end of {work_id}" in m]
    assert len(failures) == 1, failures  # once, however many retries
    assert "kept and retried" in failures[0]
    closing = [m for m in messages if "closing with" in m]
    assert len(closing) == 1
    assert f"the end of {work_id}" in closing[0]


def test_one_unit_s_writes_land_in_the_order_they_were_made(disk: tuple[Path, Filler]) -> None:
    """A later write of a unit waits behind its earlier one, even when it could land now."""
    state, filler = disk
    with Ledger(state) as ledger:
        row = new_unit(ledger)  # pending
        backlog = FailedWrites(ledger)
        landed: list[str] = []
        big = "x" * 20_000  # more than the pages the ledger has free
        running = Write(row.id, row.attempt, {"status": "running", "progress_message": big})
        ended = Write(row.id, row.attempt, {"status": "completed", "ended_at": 3.0})
        filler.fill(ledger)
        for what, write in (("running", running), ("ended", ended)):
            done = functools.partial(landed.append, what)
            backlog.submit([Pending(row.id, what, [write], done=done, status=True)])
        backlog.retry()
        assert landed == []
        assert backlog.status_waiting(row.id)
        assert ledger.units.require(row.id).status == Status.PENDING

        filler.free(ledger)
        backlog.retry()
        assert landed == ["running", "ended"]
        assert not backlog.holds(row.id)
        assert ledger.units.require(row.id).status == Status.COMPLETED
        assert [n.id for n in ledger.outbox.undelivered(None)] == [
            row.id
        ]  # its notice, with its end


def test_a_start_waiting_in_the_backlog_goes_on_only_once_it_lands(
    disk: tuple[Path, Filler],
) -> None:
    """What a start that the ledger could not record waits on (``Starts._start``): its
    ``running`` write landing, never its being let go, nor its being refused because a
    later attempt owns the unit meanwhile (``tests/cluster/test_chaos.py``)."""
    state, filler = disk
    with Ledger(state) as ledger:
        kept, dropped, taken = new_unit(ledger), new_unit(ledger), new_unit(ledger)
        backlog = FailedWrites(ledger)
        started: list[str] = []
        big = "x" * 20_000  # more than the pages the ledger has free
        assert not backlog.when_status_lands(kept.id, lambda: started.append("nothing waits"))
        filler.fill(ledger)
        for row in (kept, dropped, taken):
            running = Write(row.id, row.attempt, {"status": "running", "progress_message": big})
            backlog.submit([Pending(row.id, "its start", [running], status=True)])
            assert backlog.when_status_lands(row.id, functools.partial(started.append, row.id))
        backlog.retry()
        assert started == []
        filler.free(ledger)
        with ledger._db.write(durable=True) as conn:
            # a write no retry can mend
            conn.execute("DELETE FROM units WHERE id = ?", (dropped.id,))
            # another owner ran the next attempt meanwhile: the write comes back stale
            conn.execute("UPDATE units SET attempt = attempt + 1 WHERE id = ?", (taken.id,))
        backlog.retry()
        assert started == [kept.id]
        for row in (kept, dropped, taken):
            assert not backlog.holds(row.id)
        assert ledger.units.require(kept.id).status == Status.RUNNING
        assert ledger.units.require(taken.id).status == Status.PENDING
