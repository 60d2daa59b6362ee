"""A due time is fired exactly once or recorded missed, whatever instant a crash hits.

A real supervisor process, ticking every 5 ms with a schedule due every
second, is SIGKILLed at many offsets after a due time (0.5 ms to 0.6 s: before
its tick, during the firing's transaction, after it), again and again, on
SQLite and on PostgreSQL. Each kill is timed from the due time the ledger
names; what is checked is what the ledger says afterwards: every due time
from the first to the last has exactly one record, ``fired`` with the one
unit under its key or ``missed`` with none, and no unit of the schedule
lacks its record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.helpers import Host
from workunits._ledger import Ledger, UnitRow
from workunits.supervisor.actor.schedules import firing_key

pytestmark = pytest.mark.timeout(600)

NAME = "everysec"
# Seconds after a due time: spread over a few 5 ms ticks and a firing's transaction,
# and a few well after it, so that on a loaded machine (a starved process, a slow
# fsync) some kills still come after a firing has committed.
OFFSETS = [0.0005, 0.001, 0.002, 0.003, 0.005, 0.008, 0.012, 0.017, 0.025, 0.035, 0.05, 0.07]
OFFSETS += [0.15, 0.3, 0.6]


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        yield str(request.getfixturevalue("postgres_url"))


def _next_due(ledger: Ledger) -> float | None:
    """The schedule's next due time, once the ledger puts it ahead of now."""
    rows = [r for r in ledger.schedules.all_rows() if r.name == NAME]
    if not rows or rows[0].next_at <= time.time() + 0.2:
        return None  # not declared yet, or missed due times not recorded yet
    return rows[0].next_at


def test_sigkills_after_a_due_time_neither_lose_nor_split_a_firing(
    tmp_path: Path, ledger_url: str | None
) -> None:
    state = tmp_path / "state"
    host_args = [str(state)] + ([ledger_url] if ledger_url else [])
    killed_after: list[float] = []
    for offset in OFFSETS:
        host = Host("cron_kill_host", *host_args)
        try:
            assert host.proc.stdout is not None
            assert host.proc.stdout.readline().strip() == "ready"
            with Ledger.open(state, create=False, ledger=ledger_url) as ledger:
                due = eventually(lambda: _next_due(ledger), what="the next due time", timeout=60)
            # Timed from the due time the ledger names: the fault injected, not a sync.
            threading.Event().wait(max(0.0, due + offset - time.time()))
            host.proc.kill()
            host.proc.wait(timeout=10)
            killed_after.append(due)
        finally:
            host.close()
    # A last supervisor records what came due while none ran, then stops.
    with wu.Supervisor(
        state, ledger=ledger_url, install_signal_handlers=False, session_lease=1.0
    ) as sup:
        sup.schedule(NAME, "* * * * * *", "shell", "true", catch_up="skip")
        sup.tick()
        with Ledger.open(state, create=False, ledger=ledger_url) as ledger:
            (row,) = ledger.schedules.all_rows()
            firings = ledger.schedules.firings(NAME, limit=100_000)
            units = [
                u for u in ledger.units.list() if (u.key or "").startswith(f"schedule:{NAME}:")
            ]
    _check(firings, units, until=row.next_at, kills=killed_after)


def _check(
    firings: list[wu.ScheduleFiring], units: list[UnitRow], until: float, kills: list[float]
) -> None:
    by_due: dict[float, wu.ScheduleFiring] = {}
    for f in firings:
        assert f.due_at not in by_due, f"due time {f.due_at} recorded twice"
        by_due[f.due_at] = f
    first = min(by_due)
    expected = [first + i for i in range(round(until - first))]
    lost = [due for due in expected if due not in by_due]
    assert not lost, f"due times with no record (neither fired nor missed): {lost}"
    by_key = {u.key: u for u in units}
    assert len(by_key) == len(units), "two units under one firing's key"
    for due, firing in by_due.items():
        unit = by_key.pop(firing_key(NAME, due), None)
        if firing.outcome == "fired":
            assert unit is not None, f"the firing at {due} names {firing.unit}, which is not there"
            assert firing.unit == unit.id
        else:
            assert firing.outcome == "missed"
            assert unit is None, f"{unit and unit.id} was submitted for {due}, recorded missed"
    assert not by_key, f"units with no record of their firing: {sorted(map(str, by_key))}"
    # The kills landed around firings: some of those due times fired before the kill.
    assert any(by_due[k].outcome == "fired" for k in kills if k in by_due) or len(kills) < 3
