"""``watch --once``: the frame the live screen shows, printed once (the live screen itself is
driven in a real terminal in test_terminal.py)."""

from __future__ import annotations

import workunits as wu
from tests.cli.conftest import Run
from tests.client_support import FakeSupervisor
from workunits._core.status import Status


def test_watch_shows_active_and_recently_ended_units_and_fits_80_columns(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    busy = client.shell("make", description="x" * 200).id
    waiting = client.shell("sleep 1").id
    ended = client.shell("true").id
    fake.start(busy, progress=0.75, message="almost")
    fake.start(ended)
    fake.end(ended, Status.FAILED, exit_code=1)
    lines = run("watch", "--once").stdout.splitlines()
    assert lines[0].startswith("workunits watch")
    assert "no supervisor" in lines[0]
    assert [line.split()[0] for line in lines[2:5]] == [busy, waiting, ended]
    assert "failed" in lines[4]
    assert lines[-1].strip().startswith("1 running, 1 pending")
    assert all(len(line) <= 80 for line in lines)
    fake.open_session()
    assert "supervisor up" in run("watch", "--once").stdout
    assert ended not in run("watch", "--once", "--recent", "0s").stdout


def test_watch_says_when_there_is_nothing_to_show(run: Run, client: wu.Client) -> None:
    assert "no running or recently ended units" in run("watch", "--once").stdout
