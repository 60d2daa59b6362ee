"""``not_before``: a unit stays pending until its time, can be cancelled meanwhile, and
its delay outlives a SIGKILLed supervisor (real processes, a manual clock)."""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workunits as wu
from workunits.testing import ManualClock

ROOT = Path(__file__).resolve().parent.parent


def test_a_delayed_unit_waits_pending_until_its_time(tmp_path: Path) -> None:
    clock = ManualClock(time.time())
    with wu.Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        unit = sup.shell("echo now", not_before=60)
        due = clock.now() + 60
        # Due a second before the tick: a datetime holds microseconds, and a float time
        # rounded up past the tick would never come on a manual clock.
        at = datetime.datetime.fromtimestamp(clock.now() + 29, tz=datetime.UTC)
        other = sup.shell("echo at", not_before=at)
        sup.tick()
        record = sup.get(unit.id)
        assert (record.status, record.not_before) == (wu.Status.PENDING, due)
        assert sup.get(other.id).status == wu.Status.PENDING
        clock.advance(30)
        sup.tick()
        assert sup.wait(other.id, timeout=30).status == wu.Status.COMPLETED
        assert sup.get(unit.id).status == wu.Status.PENDING
        clock.advance(30)
        sup.tick()
        ended = sup.wait(unit.id, timeout=30)
        assert ended.status == wu.Status.COMPLETED
        assert ended.started_at is not None
        assert ended.started_at >= due


def test_a_delayed_unit_can_be_cancelled_before_it_runs(tmp_path: Path) -> None:
    clock = ManualClock(time.time())
    with wu.Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        unit = sup.shell("echo never", not_before=60)
        assert sup.cancel(unit.id)
        clock.advance(120)
        sup.tick()
        record = sup.wait(unit.id, timeout=30)
        assert (record.status, record.reason, record.started_at) == (
            wu.Status.KILLED,
            wu.Reason.CANCELLED,
            None,
        )


@pytest.mark.parametrize("bad", [-1, "soon", float("inf"), True, 1e300])
def test_a_bad_not_before_is_refused(tmp_path: Path, bad: object) -> None:
    with wu.Supervisor(tmp_path / "state") as sup, pytest.raises(wu.SpecError, match="not_before"):
        sup.shell("true", not_before=bad)  # type: ignore[arg-type]


def test_a_delay_past_the_year_9999_is_refused_everywhere(tmp_path: Path) -> None:
    """The ledger client refuses it as the supervisor does (the HTTP client shares the check)."""
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        with pytest.raises(wu.SpecError, match="past the year 9999"):
            sup.shell("true", not_before=1e12)
        with wu.connect(tmp_path / "state") as client, pytest.raises(wu.SpecError, match="9999"):
            client.shell("true", not_before=1e300)
        assert sup.list() == []


@pytest.mark.timeout(120)
def test_a_delay_outlives_a_sigkilled_supervisor(tmp_path: Path) -> None:
    state = tmp_path / "state"
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.delay_host", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        line = json.loads(host.stdout.readline())
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()
    work_id, due = line["id"], line["not_before"]

    clock = ManualClock(time.time())
    with wu.Supervisor(
        state, clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        assert work_id in sup.recovered["adopted"]
        sup.tick()
        assert sup.get(work_id).status == wu.Status.PENDING  # not before its time
        clock.set(due)
        sup.tick()
        record = sup.wait(work_id, timeout=30)
        assert record.status == wu.Status.COMPLETED
        assert record.output_tail == b"on time\n"


def test_a_client_submits_a_delayed_unit_the_supervisor_holds(tmp_path: Path) -> None:
    # The client's submit writes not_before into the pending row; the supervisor
    # that adopts the row holds it until then.
    clock = ManualClock(time.time())
    state = tmp_path / "state"
    with (
        wu.Supervisor(state, clock=clock, tick_interval=None, install_signal_handlers=False) as sup,
        wu.connect(state, clock=clock) as client,
    ):
        unit = client.shell("echo later", not_before=60)
        assert client.get(unit.id).not_before == clock.now() + 60
        sup.tick()  # adopts it, and holds it
        assert sup.get(unit.id).status == wu.Status.PENDING
        clock.advance(60)
        sup.tick()
        record = sup.wait(unit.id, timeout=30)
        assert record.status == wu.Status.COMPLETED
        with pytest.raises(wu.SpecError, match="not_before"):
            client.agent("tests.upgrade_jobs:done", 1, not_before=-5)


def test_every_kind_of_submit_takes_not_before(tmp_path: Path) -> None:
    clock = ManualClock(time.time())
    with wu.Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        held = [
            sup.dream(int, not_before=60),
            sup.monitor(["true"], "x", not_before=60),
            sup.teammate(dict, not_before=60),
        ]
        sup.tick()
        assert [sup.get(h.id).status for h in held] == [wu.Status.PENDING] * 3
        for handle in held:
            assert sup.kill(handle.id)
