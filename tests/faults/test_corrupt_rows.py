"""One damaged row stops its own unit only (invariant 14), and says how to repair it.

Rows are edited with sqlite3 as an outsider would, in real state dirs, with
real supervisor and unit processes. A row that does not decode is left as it
is and logged once at ERROR, naming the unit, what is wrong and what to do; a
unit whose stored value is gone fails ``lost`` with that error; every other
unit is resumed, adopted and run, at start and at every tick.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.conftest import alive, eventually
from tests.helpers import Host

REPAIR = "restore the ledger from a backup (`workunits backup` makes one"


def edit(state: Path, sql: str, *params: object) -> None:
    """Change the ledger as an outsider does: sqlite3, no workunits in between."""
    db = sqlite3.connect(state / "ledger.db")
    try:
        with db:
            assert db.execute(sql, params).rowcount == 1
    finally:
        db.close()


def raw_row(state: Path, work_id: str, *columns: str) -> tuple[Any, ...]:
    db = sqlite3.connect(state / "ledger.db")
    try:
        row = db.execute(
            f"SELECT {', '.join(columns)} FROM units WHERE id = ?",  # noqa: S608
            (work_id,),
        ).fetchone()
    finally:
        db.close()
    assert row is not None
    return tuple(row)


def logged_once(caplog: pytest.LogCaptureFixture, work_id: str, *needles: str) -> None:
    """One ERROR on the workunits logger names the unit and says each of ``needles``."""
    found = [
        r
        for r in caplog.records
        if r.name.startswith("workunits")
        and r.levelno == logging.ERROR
        and work_id in r.getMessage()
    ]
    assert len(found) == 1, [r.getMessage() for r in found]
    for needle in needles:
        assert needle in found[0].getMessage()


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.close()


def crashed_mixed_host(state: Path, log: Path, hosts: list[Host]) -> dict[str, str]:
    """A supervisor running a workflow, shells and agents, SIGKILLed; their IDs."""
    host = Host("durable_host", str(state), "mixed", str(log))
    hosts.append(host)
    ids: dict[str, str] = host.read()
    with wu.connect(state) as client:
        pids = [pid_of(client, ids[name]) for name in ("shell", "restart", "lambda", "agent")]
    host.sigkill()
    for pid in pids:
        gone(pid)
    return ids


def pid_of(client: wu.Client, work_id: str) -> int:
    return eventually(lambda: client.get(work_id).pid, what=f"{work_id} to start")


def gone(pid: int) -> None:
    eventually(lambda: not alive(pid), what=f"pid {pid} of the dead session to die")


# -- at start: a dead session's running units ----------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("column", "value", "what"),
    [
        ("attempt", "abc", "column attempt holds str 'abc', not int"),
        ("parent", "not-an-id", "column parent holds 'not-an-id', which is not a known"),
    ],
)
def test_a_running_row_that_does_not_decode_is_left_as_it_is_and_the_others_resume(
    tmp_path: Path,
    hosts: list[Host],
    caplog: pytest.LogCaptureFixture,
    *,
    column: str,
    value: str,
    what: str,
) -> None:
    state = tmp_path / "state"
    ids = crashed_mixed_host(state, tmp_path / "groups.log", hosts)
    bad = ids["agent"]
    edit(state, f"UPDATE units SET {column} = ? WHERE id = ?", value, bad)  # noqa: S608
    caplog.set_level(logging.ERROR, logger="workunits")

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        recovered = sup.recovered
        assert set(recovered["resumed"]) == {ids["migration"], ids["restart"]}
        assert sorted(recovered["lost"]) == sorted([ids["shell"], ids["lambda"]])
        logged_once(caplog, bad, what, REPAIR)
        # Left as it is (owned by this session, so the next takeover finds it again).
        status, stored, session = raw_row(state, bad, "status", column, "session")
        assert (status, stored, session) == ("running", value, sup.session)
        assert sup.result(ids["migration"], timeout=60) is not None
        # A read of it says the same, the whole list is not lost to it.
        with pytest.raises(wu.LedgerCorrupt, match=f"unit {bad}: {what}"):
            sup.get(bad)


@pytest.mark.timeout(120)
def test_a_running_unit_whose_checkpoint_file_is_gone_fails_lost_naming_it(
    tmp_path: Path, hosts: list[Host], caplog: pytest.LogCaptureFixture
) -> None:
    state, gate = tmp_path / "state", tmp_path / "gate"
    host = Host("large_values_host", str(state), str(2 << 20), str(gate))
    hosts.append(host)
    work_id = host.read()["id"]
    with wu.connect(state) as client:
        eventually(lambda: client.get(work_id).progress == 0.5, timeout=60, what="checkpoints")
    host.sigkill()
    (checkpoint,) = raw_row(state, work_id, "checkpoint_file")
    (state / "values" / checkpoint).unlink()
    with wu.connect(state) as client:
        other = client.agent("tests.faults.jobs:add", 2, 3).id
    caplog.set_level(logging.ERROR, logger="workunits")

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.recovered["lost"] == [work_id]
        assert sup.recovered["adopted"] == [other]
        assert sup.result(other, timeout=30) == 5
        status, reason, error = raw_row(state, work_id, "status", "reason", "error")
        assert (status, reason) == ("failed", "lost")
        assert f"unit {work_id}: its checkpoint cannot be read" in error
        assert f"the value file {checkpoint} is missing" in error
        logged_once(caplog, work_id, "its checkpoint cannot be read", "delete that unit's row")
        # Ended, its checkpoint is moot: the record reads, without it.
        record = sup.wait(work_id, timeout=30)
        assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
    with wu.connect(state) as client:
        assert client.row(work_id).checkpoint is None


@pytest.mark.timeout(120)
def test_a_running_unit_whose_checkpoint_is_not_json_fails_lost_without_a_process(
    tmp_path: Path, hosts: list[Host], caplog: pytest.LogCaptureFixture
) -> None:
    state, gate = tmp_path / "state", tmp_path / "gate"
    host = Host("large_values_host", str(state), "10", str(gate))
    hosts.append(host)
    work_id = host.read()["id"]
    with wu.connect(state) as client:
        eventually(lambda: client.get(work_id).progress == 0.5, timeout=60, what="checkpoints")
    host.sigkill()
    # Unsigned, as a ledger written before checkpoints were signed keeps it: the
    # JSON itself is then what fails (a signed one fails its HMAC first).
    edit(
        state,
        "UPDATE units SET checkpoint = ?, checkpoint_mac = NULL WHERE id = ?",
        b"{next",
        work_id,
    )
    caplog.set_level(logging.ERROR, logger="workunits")

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.recovered["lost"] == [work_id]
        record = sup.wait(work_id, timeout=30)
        assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
        assert record.attempt == 1  # no attempt began, no process was started for it
        error = record.error or ""
        assert f"LedgerCorrupt: unit {work_id}: column checkpoint does not hold valid JSON" in (
            error
        )
        assert error.endswith("or delete that unit's row"), error
        logged_once(caplog, work_id, "column checkpoint", REPAIR)


@pytest.mark.timeout(120)
def test_a_checkpoint_changed_outside_workunits_is_not_resumed_from(
    tmp_path: Path, hosts: list[Host]
) -> None:
    state, gate = tmp_path / "state", tmp_path / "gate"
    host = Host("large_values_host", str(state), "10", str(gate))
    hosts.append(host)
    work_id = host.read()["id"]
    with wu.connect(state) as client:
        eventually(lambda: client.get(work_id).progress == 0.5, timeout=60, what="checkpoints")
    host.sigkill()
    edit(state, "UPDATE units SET checkpoint = ? WHERE id = ?", b'{"done": 9}', work_id)

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.recovered["lost"] == [work_id]
        record = sup.wait(work_id, timeout=30)
        assert (record.status, record.reason) == (wu.Status.FAILED, wu.Reason.LOST)
        assert record.attempt == 1  # never resumed from what someone else wrote
        assert "LedgerTampered" in (record.error or "")
    with wu.connect(state) as client:
        assert client.row(work_id).checkpoint is None  # never shown as if it were its own


# -- pending units: at start, and while a supervisor runs ---------------------------------


@pytest.mark.timeout(60)
def test_a_pending_row_that_does_not_decode_does_not_stop_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    with wu.connect(state) as client:
        bad = client.agent("tests.faults.jobs:add", 1, 1).id
        good = client.agent("tests.faults.jobs:add", 2, 2).id
    edit(state, "UPDATE units SET attempt = 'abc' WHERE id = ?", bad)
    caplog.set_level(logging.ERROR, logger="workunits")

    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        assert sup.recovered["adopted"] == [good]
        assert sup.result(good, timeout=30) == 4
        logged_once(caplog, bad, "column attempt holds str 'abc'", REPAIR)
        status, attempt, session = raw_row(state, bad, "status", "attempt", "session")
        assert (status, attempt, session) == ("pending", "abc", sup.session)


@pytest.mark.timeout(60)
def test_a_pending_row_that_does_not_decode_takes_no_slot_from_the_units_behind_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One agent slot: the damaged row is the oldest pending agent, so every claim
    picks it first. Claimed out of the queue once, it lets the next one start."""
    state = tmp_path / "state"
    caplog.set_level(logging.ERROR, logger="workunits")
    with (
        wu.Supervisor(state, install_signal_handlers=False, concurrency={"agent": 1}) as sup,
        wu.connect(state) as client,
    ):
        blocker = sup.agent("tests.faults.jobs:count_runs", str(tmp_path / "runs.log"))
        eventually(lambda: sup.get(blocker.id).pid, what="the blocker to start")
        bad = client.agent("tests.faults.jobs:add", 1, 1).id
        good = client.agent("tests.faults.jobs:add", 2, 2).id
        edit(state, "UPDATE units SET attempt = 'abc' WHERE id = ?", bad)
        assert sup.kill(blocker.id)
        assert client.result(good, timeout=30) == 4
        logged_once(caplog, bad, "column attempt holds str 'abc'", REPAIR)
        assert raw_row(state, bad, "status", "session") == ("pending", sup.session)
        # Later submits are adopted as well: the tick goes on.
        assert client.result(client.agent("tests.faults.jobs:add", 3, 3).id, timeout=30) == 6


# -- listing ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_row_that_does_not_decode_is_left_out_of_a_list_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    caplog.set_level(logging.WARNING, logger="workunits")
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        bad = sup.agent("tests.faults.jobs:add", 1, 1).id
        good = sup.agent("tests.faults.jobs:add", 2, 2).id
        assert sup.result(bad, timeout=30) == 2
        assert sup.result(good, timeout=30) == 4
    edit(state, "UPDATE units SET status = 'bogus' WHERE id = ?", bad)

    with wu.Supervisor(state, install_signal_handlers=False) as sup, wu.connect(state) as client:
        for listing in (sup.list(), client.list(), sup.list(), client.list()):
            assert [r.id for r in listing] == [good]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and bad in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]  # once per process
    assert warned[0].name.startswith("workunits")
    message = warned[0].getMessage()
    assert f"unit {bad}: column status holds 'bogus'" in message
    assert REPAIR in message
