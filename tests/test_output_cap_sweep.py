"""The supervisor's output-size sweep: the backup for units the kernel's cap does not stop.

A shell that ignores SIGXFSZ only sees its writes fail at the cap and runs on;
the sweep kills it. A round looks at ``OUTPUT_CAP_CHECKS_PER_ROUND`` files at
most, so the idle supervisor's cost stays flat with thousands of running units;
a unit beyond the budget is checked in a later round, none is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import eventually
from workunits import Reason, Status, Supervisor, WorkHandle
from workunits.supervisor.actor import control
from workunits.testing import ManualClock

CAP = 4096
# Writes past the cap (the kernel refuses them: EFBIG, the signal ignored), then lives on.
OVERFLOW = ["sh", "-c", "trap '' XFSZ; head -c 100000 /dev/zero; exec sleep 60"]

pytestmark = pytest.mark.timeout(60)


def _three_at_their_cap(sup: Supervisor) -> list[WorkHandle]:
    """Three running units whose output files reached their cap (and stopped there)."""
    units = [sup.shell(OVERFLOW, output_cap=CAP) for _ in range(3)]
    for unit in units:
        path = sup.get(unit.id).output_path
        assert path is not None
        eventually(_at_cap(path), what=f"{unit.id} to reach its cap")
    return units


def _at_cap(path: str) -> Callable[[], bool]:
    return lambda: os.path.exists(path) and os.path.getsize(path) >= CAP


def test_a_round_checks_at_most_its_budget_and_the_sweep_reaches_every_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "OUTPUT_CAP_CHECKS_PER_ROUND", 1)
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        units = _three_at_their_cap(sup)
        for n, unit in enumerate(units, start=1):
            clock.advance(control.OUTPUT_CAP_CHECK_EVERY)
            sup.tick()
            record = sup.wait(unit.id, timeout=20)
            assert record.status == Status.KILLED, record
            assert record.reason == Reason.OUTPUT_CAP, record
            # One file per round: the units after it are still running.
            assert [sup.get(u.id).status for u in units[n:]] == [Status.RUNNING] * (3 - n)


def test_a_round_within_its_budget_checks_every_running_unit(tmp_path: Path) -> None:
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state", clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        units = _three_at_their_cap(sup)
        clock.advance(control.OUTPUT_CAP_CHECK_EVERY)
        sup.tick()
        for unit in units:
            record = sup.wait(unit.id, timeout=20)
            assert (record.status, record.reason) == (Status.KILLED, Reason.OUTPUT_CAP), record
