"""The supervisor actor's inbox keeps its clock: ticks every interval, never starved by
messages and never starving them (``supervisor.ticker``)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from pykka._envelope import Envelope

import workunits as wu
from workunits.supervisor.ticker import TickingInbox

pytestmark = pytest.mark.timeout(20)


class Tick:
    pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _messages(inbox: TickingInbox, n: int) -> list[Envelope[object]]:
    sent: list[Envelope[object]] = [Envelope(f"m{i}") for i in range(n)]
    for envelope in sent:
        inbox.put(envelope)
    return sent


def test_a_due_tick_comes_before_waiting_messages_and_then_they_come_in_order() -> None:
    clock = Clock()
    inbox = TickingInbox(Tick, clock=clock)
    inbox.start_ticking(1.0)
    sent = _messages(inbox, 3)
    assert inbox.get() is sent[0]  # not due yet: messages first
    clock.now += 1.5
    assert isinstance(inbox.get().message, Tick)  # due: before the messages that wait
    assert inbox.get() is sent[1]
    clock.now += 0.9  # the next tick is one interval after the late one (at 102.5)
    assert inbox.get() is sent[2]
    assert inbox.empty()


def test_ticks_missed_while_busy_come_once_not_in_a_burst() -> None:
    clock = Clock()
    inbox = TickingInbox(Tick, clock=clock)
    inbox.start_ticking(0.05)
    sent = _messages(inbox, 2)
    clock.now += 10.0  # 200 intervals while the actor was busy
    assert isinstance(inbox.get().message, Tick)
    assert inbox.get() is sent[0]
    assert inbox.get() is sent[1]


def test_an_idle_inbox_hands_out_ticks_at_its_interval() -> None:
    inbox = TickingInbox(Tick)
    interval = 0.02
    inbox.start_ticking(interval)
    start = time.monotonic()
    ticks = [inbox.get() for _ in range(5)]
    elapsed = time.monotonic() - start
    assert all(isinstance(t.message, Tick) and t.reply_to is None for t in ticks)
    assert elapsed >= 5 * interval * 0.9  # a tick is not handed out before it is due


def test_a_message_put_while_waiting_for_a_tick_comes_at_once() -> None:
    inbox = TickingInbox(Tick)
    inbox.start_ticking(3600.0)  # no tick due during this test
    envelope: Envelope[object] = Envelope("hello")
    got: list[Envelope[object]] = []
    reader = threading.Thread(target=lambda: got.append(inbox.get()))
    reader.start()
    inbox.put(envelope)
    reader.join(5)
    assert got == [envelope]


def test_without_an_interval_there_are_no_ticks() -> None:
    inbox = TickingInbox(Tick)
    sent = _messages(inbox, 2)
    assert [inbox.get(), inbox.get()] == sent
    assert inbox.empty()


def test_a_supervisor_ticks_from_its_inbox_with_no_thread_of_its_own(tmp_path: object) -> None:
    with wu.Supervisor(
        f"{tmp_path}/state", tick_interval=None, install_signal_handlers=False
    ) as sup:
        assert sup._runtime._ref.actor_inbox._interval is None  # type: ignore[attr-defined]
    with wu.Supervisor(f"{tmp_path}/state2", install_signal_handlers=False) as sup:
        assert sup._runtime._ref.actor_inbox._interval == 0.05  # type: ignore[attr-defined]
        assert not [t for t in threading.enumerate() if t.name == "workunits-ticker"]
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
