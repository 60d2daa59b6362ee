"""A unit's pid reaches its record without a message of its own (``supervisor.actor.pids``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually
from tests.helpers import WAIT
from workunits import Status, Supervisor
from workunits.supervisor.actor.supervisor_actor import SupervisorActor

pytestmark = pytest.mark.timeout(60)

# What the supervisor's thread may be told or asked about one shell unit that runs
# to its end: its submit, its end, and the group-commit flushes it tells itself.
ONE_UNIT = {"Register", "EndReport", "FlushSubmits", "FlushEnds"}


@pytest.fixture
def quiet(state_dir: Path) -> Iterator[Supervisor]:
    """No ticker: every message the supervisor's thread handles is one a unit caused."""
    with Supervisor(state_dir, tick_interval=None, install_signal_handlers=False) as sup:
        yield sup


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The type of every message the supervisor actor handles, in order."""
    seen: list[str] = []
    original = SupervisorActor.on_receive

    def spy(self: SupervisorActor, message: Any) -> Any:
        seen.append(type(message).__name__)
        return original(self, message)

    monkeypatch.setattr(SupervisorActor, "on_receive", spy)
    return seen


def test_a_unit_wakes_the_supervisor_for_its_submit_and_its_end_only(
    handled: list[str], quiet: Supervisor
) -> None:
    for _ in range(3):
        handled.clear()
        record = quiet.wait(quiet.shell(["true"]).id, WAIT)
        assert record.status is Status.COMPLETED
        assert record.pid is not None  # reported before its end, by the same thread
        assert set(handled) <= ONE_UNIT, handled
        assert handled.count("EndReport") == 1, handled


def test_a_running_units_pid_is_seen_by_the_next_ask_with_no_tick(quiet: Supervisor) -> None:
    unit = quiet.shell(["sh", "-c", "echo $$; exec sleep 600"])
    path = Path(quiet.get(unit.id).output_path or "")
    # The shell's own line says its pid; no message but our asks reaches the supervisor.
    line = eventually(lambda: _text(path), what="the shell to say its pid")
    assert eventually(lambda: quiet.get(unit.id).pid, what="the pid in the record") == int(line)
    assert unit.kill() is True
    assert quiet.wait(unit.id, WAIT).pid == int(line)


def _text(path: Path) -> str:
    """What the file holds so far; empty while it does not exist yet (a launch in flight)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""
