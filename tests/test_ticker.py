"""The Ticker tells the supervisor actor ``Tick`` every interval; the deadlines run on
ticks (``supervisor.actor.ticker``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import workunits as wu
from workunits.supervisor.actor.ticker import Ticker

pytestmark = pytest.mark.timeout(20)


def test_a_ticker_calls_at_its_interval_until_closed() -> None:
    times: list[float] = []
    five = threading.Event()

    def tick() -> None:
        times.append(time.monotonic())
        if len(times) == 5:
            five.set()

    interval = 0.02
    start = time.monotonic()
    ticker = Ticker(interval, tick)
    assert five.wait(10)
    ticker.close()
    assert times[4] - start >= 5 * interval * 0.9  # a tick is not sent before it is due
    after = len(times)
    assert not [t for t in threading.enumerate() if t.name == "workunits-ticker"]
    assert len(times) == after


def test_a_supervisor_ticks_from_its_ticker_unless_told_not_to(tmp_path: object) -> None:
    with wu.Supervisor(
        f"{tmp_path}/state", tick_interval=None, install_signal_handlers=False
    ) as sup:
        assert sup._machinery._ticker is None
    with wu.Supervisor(f"{tmp_path}/state2", install_signal_handlers=False) as sup:
        assert sup._machinery._ticker is not None
        # Ticks run the deadlines: a unit past its timeout ends without anyone asking.
        record = sup.wait(sup.shell(["sleep", "30"], timeout=0.2).id, timeout=15)
        assert record.status is wu.Status.KILLED


@pytest.mark.parametrize("bad", [0, -0.05, float("nan"), float("inf"), "0.05", True])
def test_a_bad_tick_interval_is_refused_before_anything_starts(
    tmp_path: object, bad: object
) -> None:
    state = f"{tmp_path}/state"
    with pytest.raises(wu.SpecError, match="tick_interval must be a finite number of seconds > 0"):
        wu.Supervisor(state, tick_interval=bad)  # type: ignore[arg-type]
    assert not os.path.exists(state)  # refused before the state dir was made
