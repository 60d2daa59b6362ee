"""``workunits schedules``: the ledger's cron entries, read with no supervisor running."""

from __future__ import annotations

import json
from pathlib import Path

import workunits as wu
from tests.cli.conftest import Run
from workunits.testing import ManualClock


def test_schedules_lists_next_due_and_the_latest_firing(run: Run, state_dir: Path) -> None:
    clock = ManualClock()  # 1_000_000: 1970-01-12 13:46:40 UTC
    with wu.Supervisor(
        state_dir, clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        sup.schedule("ten", "*/10 * * * *", "shell", "true")
        sup.schedule("nightly", "0 3 * * *", "shell", "true")
        clock.set(1_000_200)
        sup.tick()
        (fired,) = [r.id for r in sup.list() if r.description.startswith("ten at ")]
    header, nightly, ten = run("schedules", columns=160).stdout.strip().splitlines()
    assert header.split() == ["NAME", "CRON", "TZ", "NEXT", "DUE", "LAST", "FIRING"]
    assert nightly.split()[0] == "nightly"
    assert "1970-01-13 03:00:00Z" in nightly
    assert nightly.rstrip().endswith("-")
    assert ten.split()[0] == "ten"
    assert "1970-01-12 14:00:00Z" in ten
    assert ten.rstrip().endswith(f"1970-01-12 13:50:00Z fired {fired}")
    docs = [json.loads(line) for line in run("schedules", "--json").stdout.splitlines()]
    assert [d["name"] for d in docs] == ["nightly", "ten"]
    assert docs[1]["last"] == {"due_at": 1_000_200.0, "outcome": "fired", "unit": fired}
    with wu.Supervisor(
        state_dir, clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        assert sup.unschedule("ten")
        assert sup.unschedule("nightly")
    assert run("schedules").stdout.strip() == "no schedules"
