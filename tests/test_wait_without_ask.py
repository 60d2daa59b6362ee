"""``wait`` on a unit this process started and that has not ended needs no read of it.

Its end is told to the waiters by the supervisor's change events, so the wait
goes straight to waiting (no ask to the supervisor actor: one round trip
between threads fewer per unit), and it still returns the terminal record, or
hears the supervisor closed.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually
from tests.helpers import WAIT
from workunits import Status, Supervisor, SupervisorClosed, connect
from workunits.supervisor.actor import requests as rq


def _count_gets(sup: Supervisor) -> list[Any]:
    """Every Get the facade asks from now on (instrumenting its channel, not replacing it)."""
    seen: list[Any] = []
    channel = sup._channel
    ask, ask_async = channel.ask, channel.ask_async

    def counted(request: Any) -> Any:
        if isinstance(request, rq.Get):
            seen.append(request)
        return ask(request)

    async def counted_async(request: Any) -> Any:
        if isinstance(request, rq.Get):
            seen.append(request)
        return await ask_async(request)

    channel.ask = counted  # type: ignore[method-assign]
    channel.ask_async = counted_async  # type: ignore[method-assign]
    return seen


def test_waiting_for_a_unit_started_here_reads_nothing(sup: Supervisor) -> None:
    gets = _count_gets(sup)
    record = sup.wait(sup.shell(["true"]).id, WAIT)
    assert record.status is Status.COMPLETED
    assert record.durable
    assert gets == []


def test_an_async_wait_for_a_unit_started_here_reads_nothing(sup: Supervisor) -> None:
    gets = _count_gets(sup)

    async def main() -> Status:
        handle = await sup.shell_async(["true"])
        return (await sup.wait_async(handle.id, WAIT)).status

    assert asyncio.run(main()) is Status.COMPLETED
    assert gets == []


def test_a_unit_that_ended_before_the_wait_is_read(sup: Supervisor) -> None:
    unit = sup.shell(["true"])
    first = sup.wait(unit.id, WAIT)
    gets = _count_gets(sup)
    assert sup.wait(unit.id, WAIT) == first  # its end was told already: read it
    assert len(gets) == 1


def test_a_wait_after_close_hears_the_supervisor_closed(state_dir: Path) -> None:
    sup = Supervisor(state_dir, concurrency={"shell": 1}, install_signal_handlers=False)
    sup.shell(["sleep", "30"])
    unit = sup.shell(["true"])  # queued in memory behind the first
    assert sup.get(unit.id).status is Status.PENDING
    sup.close(deploy=True)  # a queued unit is left to the next supervisor, not ended
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            sup.wait(unit.id)  # no timeout: a wait that is never woken hangs
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(WAIT)
    assert not waiter.is_alive()
    assert len(outcome) == 1
    with pytest.raises(SupervisorClosed):
        raise outcome[0]


@pytest.mark.parametrize("twin", ["blocking", "async"])
def test_a_wait_through_a_deploy_hears_the_close_not_an_end(state_dir: Path, twin: str) -> None:
    """A deploy leaves a pending unit to the next supervisor: it has not ended."""
    sup = Supervisor(state_dir, concurrency={"shell": 1}, install_signal_handlers=False)
    sup.shell(["sleep", "30"])
    unit = sup.shell(["true"])  # queued in memory behind the first
    outcome: list[object] = []

    def wait() -> None:
        try:
            if twin == "blocking":
                outcome.append(sup.wait(unit.id))  # no timeout: never woken, it hangs
            else:
                outcome.append(asyncio.run(sup.wait_async(unit.id)))
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    eventually(lambda: len(sup._waiters._waiters.get(unit.id, [])) == 1)
    sup.close(deploy=True)
    waiter.join(WAIT)
    assert not waiter.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], SupervisorClosed), outcome[0]  # not "killed"
    with connect(state_dir) as client:
        assert client.get(unit.id).status is Status.PENDING
