"""Schedules: cron entries in the ledger whose firings start units, once each.

Manual time for the firings (``msup``; the clock starts at 1_000_000, 13:46:40
UTC, so ``*/10`` minutes is first due at 1_000_200), a supervisor started
again on the same state dir for the missed ones, and one real supervisor
process SIGKILLed between firings.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import workunits as wu
from workunits._cli import schedules as schedules_cli
from workunits.testing import ManualClock

from .conftest import eventually

ROOT = Path(__file__).resolve().parent.parent
FIRST = 1_000_200.0  # the first */10-minute time after the manual clock's start
EVERY = 600.0


def _fired(sup: wu.Supervisor, name: str) -> list[wu.WorkRecord]:
    return [r for r in sup.list() if r.description.startswith(f"{name} at ")]


def test_a_schedule_fires_once_per_due_time(msup: wu.Supervisor, clock: ManualClock) -> None:
    msup.schedule("ten", "*/10 * * * *", "shell", "true")
    (info,) = msup.schedules()
    assert (info.name, info.cron, info.next_at, info.last) == ("ten", "*/10 * * * *", FIRST, None)
    clock.set(FIRST - 1)
    msup.tick()
    assert _fired(msup, "ten") == []
    clock.set(FIRST)
    msup.tick()
    msup.tick()  # due once: a second tick fires nothing more
    (first,) = _fired(msup, "ten")
    assert first.description == "ten at 1970-01-12T13:50:00+00:00"
    (info,) = msup.schedules()
    assert info.next_at == FIRST + EVERY
    assert info.last is not None
    assert (info.last.due_at, info.last.unit, info.last.outcome) == (FIRST, first.id, "fired")
    clock.set(FIRST + EVERY + 5)
    msup.tick()
    assert len(_fired(msup, "ten")) == 2
    assert msup.unschedule("ten") is True
    assert msup.unschedule("ten") is False
    clock.set(FIRST + 5 * EVERY)
    msup.tick()
    assert len(_fired(msup, "ten")) == 2
    assert msup.schedules() == []


def test_bad_schedules_are_refused(msup: wu.Supervisor) -> None:
    with pytest.raises(wu.InvalidArgument, match="not a cron expression"):
        msup.schedule("bad", "every night", "shell", "true")
    with pytest.raises(wu.InvalidArgument, match="unknown time zone"):
        msup.schedule("bad", "0 3 * * *", "shell", "true", tz="Mars/Olympus")
    with pytest.raises(wu.InvalidArgument, match="catch_up"):
        msup.schedule("bad", "0 3 * * *", "shell", "true", catch_up="all")
    with pytest.raises(wu.SpecError, match="kind"):
        msup.schedule("bad", "0 3 * * *", "monitor", "true")
    # Options every firing's submit would refuse: refused now, not at each firing.
    with pytest.raises(wu.SpecError, match="timeout"):
        msup.schedule("bad", "0 3 * * *", "shell", "true", timeout=-5)
    with pytest.raises(wu.SpecError, match="description"):
        msup.schedule("bad", "0 3 * * *", "shell", "true", description=42)  # type: ignore[arg-type]
    assert msup.schedules() == []


def test_a_cron_that_names_no_time_after_now_is_refused(msup: wu.Supervisor) -> None:
    """Not croniter's own error: a 31st of February, or a year that has passed."""
    for cron in ("0 0 31 2 *", "0 0 1 1 * 0 1970"):  # the manual clock starts after it
        with pytest.raises(wu.InvalidArgument, match="names no time after now"):
            msup.schedule("never", cron, "shell", "true")
    assert msup.schedules() == []


def test_a_cron_with_a_last_time_fires_it_then_never_and_stops_no_other(
    msup: wu.Supervisor, clock: ManualClock
) -> None:
    """After its last time, croniter finds no next one: that ended only this schedule,
    where it had stopped every schedule's firing and the rest of the tick."""
    once = FIRST + EVERY  # 14:00:00 UTC on 12 January 1970, a */10 time too
    msup.schedule("once", "0 14 12 1 * 0 1970", "shell", "true")  # minute ... second year
    msup.schedule("ten", "*/10 * * * *", "shell", "true")
    clock.set(once)
    msup.tick()
    assert len(_fired(msup, "once")) == 1
    infos = {info.name: info for info in msup.schedules()}
    assert infos["once"].next_at == math.inf
    clock.set(once + EVERY)
    msup.tick()
    assert len(_fired(msup, "once")) == 1
    assert len(_fired(msup, "ten")) == 3  # 13:50 and 14:00 at the first tick, then 14:10
    assert schedules_cli._when(math.inf) == "never"


def test_the_cron_is_read_in_its_time_zone(msup: wu.Supervisor) -> None:
    msup.schedule("paris", "0 3 * * *", "shell", "true", tz="Europe/Paris")
    (info,) = msup.schedules()
    # 03:00 in Paris on 13 January 1970 (UTC+1) is 02:00 UTC.
    assert info.next_at == 1_000_000 + (2 * 3600 + 86400 - (13 * 3600 + 46 * 60 + 40))


def _open(state: Path, clock: ManualClock) -> wu.Supervisor:
    return wu.Supervisor(state, clock=clock, tick_interval=None, install_signal_handlers=False)


def test_firings_missed_while_down_are_recorded_or_run_once(tmp_path: Path) -> None:
    state, clock = tmp_path / "state", ManualClock()
    with _open(state, clock) as sup:
        sup.schedule("skip", "*/10 * * * *", "shell", "true")
        sup.schedule("catch", "*/10 * * * *", "shell", "true", catch_up="run-once")
    clock.set(FIRST + 2 * EVERY + 100)  # three due times pass with no supervisor
    for _ in range(2):  # and a second restart fires nothing again
        with _open(state, clock) as sup:
            sup.schedule("skip", "*/10 * * * *", "shell", "true")  # declared again: kept
            sup.tick()
            assert _fired(sup, "skip") == []
            (caught,) = _fired(sup, "catch")
            assert caught.description == "catch at 1970-01-12T14:10:00+00:00"
            with wu.connect(state) as client:
                skipped = client.ledger.schedules.firings("skip")
                fired = client.ledger.schedules.firings("catch")
            assert [(f.due_at, f.outcome) for f in skipped] == [
                (FIRST + 2 * EVERY, "missed"),
                (FIRST + EVERY, "missed"),
                (FIRST, "missed"),
            ]
            assert [(f.due_at, f.outcome, f.unit) for f in fired] == [
                (FIRST + 2 * EVERY, "fired", caught.id),
                (FIRST + EVERY, "missed", None),
                (FIRST, "missed", None),
            ]
            assert {i.name: i.next_at for i in sup.schedules()} == {
                "catch": FIRST + 3 * EVERY,
                "skip": FIRST + 3 * EVERY,
            }


def test_a_firing_submitted_but_not_recorded_before_a_crash_counts_as_fired(
    tmp_path: Path,
) -> None:
    state, clock = tmp_path / "state", ManualClock()
    with _open(state, clock) as sup:
        sup.schedule("ten", "*/10 * * * *", "shell", "true")
        # What a supervisor killed between the firing's submit and its record leaves.
        unit = sup.shell("true", key="schedule:ten:1970-01-12T13:50:00+00:00").id
    clock.set(FIRST + 100)
    with _open(state, clock) as sup:
        sup.tick()
    with wu.connect(state) as client:
        (firing,) = client.ledger.schedules.firings("ten")
    assert (firing.due_at, firing.outcome, firing.unit) == (FIRST, "fired", unit)


@pytest.mark.timeout(120)
def test_a_sigkilled_supervisor_s_missed_firings_are_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.schedule_host", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "ready"
        with wu.connect(state) as client:
            eventually(lambda: client.ledger.schedules.firings("every2s"), what="a first firing")
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=10)
            before = client.ledger.schedules.firings("every2s")
            (row,) = client.ledger.schedules.all_rows()
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()
    assert all(f.outcome == "fired" for f in before)
    # Restarted 10 s after the next due time: five due times passed while down.
    clock = ManualClock(row.next_at + 9)
    with _open(state, clock) as sup:
        sup.schedule("every2s", "* * * * * */2", "shell", "true", catch_up="run-once")
        sup.tick()
        sup.tick()
        with wu.connect(state) as client:
            after = client.ledger.schedules.firings("every2s")
        new = [f for f in after if f.due_at >= row.next_at]
        assert [f.due_at for f in reversed(new)] == [row.next_at + 2 * i for i in range(5)]
        assert [f.outcome for f in reversed(new)] == ["missed"] * 4 + ["fired"]
        assert sup.schedules()[0].next_at == row.next_at + 10
        fired_units = [f.unit for f in after if f.unit is not None]
        assert len(fired_units) == len(set(fired_units)) == len(before) + 1
