"""``tail -f`` and ``watch`` in a real terminal, against a live ``workunits serve``.

What is asserted is what the screen shows (a pyte emulator fed by the
pseudo-terminal), and what the ledger says about retains while a viewer looks.
"""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import workunits as wu
from tests.cli.live import WAIT, Serve, Terminal, release
from tests.conftest import eventually

pytestmark = pytest.mark.slow

Open = Callable[..., Terminal]


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "go"
    os.mkfifo(path)
    return path


def _retained(client: wu.Client, work_id: str, count: int) -> None:
    """Wait until ``work_id`` is held by a live retain lease (count 1) or by none (0)."""
    wanted = {work_id} if count else set()
    eventually(
        lambda: client.ledger.retains.held([work_id]) == wanted,
        timeout=WAIT,
        what=f"{work_id} to be {'retained' if count else 'released'}",
    )


def _line_of(screen: str, work_id: str) -> str:
    return next((line for line in screen.splitlines() if line.startswith(work_id)), "")


def test_tail_follow_shows_output_as_it_comes_then_the_final_status(
    served: Serve, client: wu.Client, terminal: Open, tmp_path: Path
) -> None:
    fifo = _fifo(tmp_path)
    work_id = client.shell(f"echo started; read word < {shlex.quote(str(fifo))}; echo got $word").id
    term = terminal("tail", "-f", "--state", str(client.state_dir), work_id)
    term.wait_for("started")
    _retained(client, work_id, 1)  # followed: retained
    assert "got" not in term.text()
    release(fifo, "go")
    screen = term.wait_for(f"-- {work_id} completed (exit code 0)")
    assert screen.splitlines()[:2] == ["started", "got go"]
    assert term.wait_exit() == 0
    _retained(client, work_id, 0)  # released on the way out


def test_tail_follow_renders_an_agent_transcript(
    served: Serve, client: wu.Client, terminal: Open, tmp_path: Path
) -> None:
    fifo = _fifo(tmp_path)
    work_id = client.agent("tests.cli.e2e_units:half_way_then", str(fifo)).id
    term = terminal("tail", "-f", "--state", str(client.state_dir), work_id)
    # Progress and printed lines reach the transcript by different paths: wait for both.
    screen = term.wait_for(lambda s: "waiting for the go" in s and "half way" in s)
    assert f"[start] {work_id} attempt 1" in screen
    assert "[progress]  50% half way" in screen
    release(fifo, "go")
    screen = term.wait_for(f"-- {work_id} completed")
    assert "got go" in screen
    assert '[result] "go"' in screen
    assert term.wait_exit() == 0


def test_ctrl_c_stops_tail_follow_and_releases_the_unit(
    served: Serve, client: wu.Client, terminal: Open
) -> None:
    work_id = client.shell("echo ready; exec sleep 600").id
    term = terminal("tail", "-f", "--state", str(client.state_dir), work_id)
    term.wait_for("ready")
    _retained(client, work_id, 1)
    term.interrupt()
    assert term.wait_exit() == 130
    _retained(client, work_id, 0)
    assert client.get(work_id).status is wu.Status.RUNNING  # leaving a tail ends nothing
    assert client.kill(work_id)
    assert client.wait(work_id, WAIT).status is wu.Status.KILLED


def test_watch_shows_units_live_retains_them_and_quits_on_q(
    served: Serve, client: wu.Client, terminal: Open, tmp_path: Path
) -> None:
    fifo = _fifo(tmp_path)
    quick = client.shell("true", description="quick one").id
    client.wait(quick, WAIT)
    slow = client.agent(
        "tests.cli.e2e_units:half_way_then", str(fifo), description="the migration"
    ).id
    # Wide enough for the bar, the report's age ("19s ago" on a loaded machine) and
    # the message together.
    term = terminal("watch", "--state", str(client.state_dir), "--interval", "0.05", cols=120)
    # Wait for a whole frame: rich redraws top to bottom, so a read may end mid-frame.
    screen = term.wait_for(
        lambda s: "half way" in _line_of(s, slow) and "completed" in _line_of(s, quick)
    )
    lines = screen.splitlines()
    assert lines[0].startswith("workunits watch  supervisor up")
    assert lines[1].split() == ["ID", "KIND", "STATUS", "AGE", "PROGRESS", "DESCRIPTION"]
    row = _line_of(screen, slow)
    assert row.split()[1:3] == ["agent", "running"]
    assert "━━━━────  50% " in row
    assert "half way" in row.split("50%", 1)[1]  # after the report's age, if shown
    assert "the migration" in row
    assert _line_of(screen, quick).split()[1:3] == ["shell", "completed"]
    assert "1 running, 0 pending" in screen
    _retained(client, slow, 1)
    _retained(client, quick, 1)

    release(fifo, "go")
    term.wait_for(lambda s: "completed" in _line_of(s, slow))

    term.send("q")
    assert term.wait_exit() == 0
    _retained(client, slow, 0)
    _retained(client, quick, 0)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_a_watch_killed_outright_holds_nothing(
    served: Serve, client: wu.Client, terminal: Open, signum: int
) -> None:
    # A closed terminal (SIGHUP) or a SIGKILL gives watch no chance to release:
    # its leases name its process, and lapse as soon as it is gone.
    work_id = client.shell("true").id
    client.wait(work_id, WAIT)
    term = terminal("watch", "--state", str(client.state_dir), "--interval", "0.05")
    term.wait_for(lambda s: "completed" in _line_of(s, work_id))
    _retained(client, work_id, 1)
    pid = term.child.pid
    assert pid is not None
    os.kill(pid, signum)
    term.wait_exit()
    _retained(client, work_id, 0)


def test_watch_quits_on_ctrl_c(served: Serve, client: wu.Client, terminal: Open) -> None:
    work_id = client.shell("true").id
    client.wait(work_id, WAIT)
    term = terminal("watch", "--state", str(client.state_dir))
    term.wait_for(lambda s: "completed" in _line_of(s, work_id))
    term.interrupt()
    assert term.wait_exit() == 0
    _retained(client, work_id, 0)


def test_watch_in_a_short_terminal_says_what_it_cannot_show(
    served: Serve, client: wu.Client, terminal: Open
) -> None:
    ids = [client.shell("true", description=f"unit {i}").id for i in range(8)]
    for work_id in ids:
        client.wait(work_id, WAIT)
    term = terminal("watch", "--state", str(client.state_dir), rows=8)
    screen = term.wait_for("more (the terminal is too short)")
    assert sum(1 for line in screen.splitlines() if line[:9] in ids) == 4
    term.send("q")
    assert term.wait_exit() == 0
