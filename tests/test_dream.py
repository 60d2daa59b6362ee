"""Dreams (``d``): agents at idle CPU priority, and ``shed()`` killing them first."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import workunits as wu

from .kinds_support import Fifo, read_line, supervisor, write_line

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHED_IDLE = getattr(os, "SCHED_IDLE", None)
needs_sched_idle = pytest.mark.skipif(SCHED_IDLE is None, reason="no SCHED_IDLE on this platform")


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with supervisor(tmp_path) as s:
        yield s


@pytest.fixture
def fifos(tmp_path: Path) -> Iterator[tuple[Fifo, Fifo]]:
    said, gate = Fifo(tmp_path / "said"), Fifo(tmp_path / "gate")
    yield said, gate
    said.close()
    gate.close()


def my_priority() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


def policies_of_my_threads() -> list[int]:
    """The scheduling policy of every thread of this process (the capture's pump included)."""
    return [os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")]


def report_pid_then_wait(said: str, gate: str) -> str:
    write_line(said, str(os.getpid()))
    return read_line(gate)


def wait_for_gate(gate: str) -> str:
    return read_line(gate)


@needs_sched_idle
def test_a_dream_runs_at_idle_priority_and_an_agent_does_not(sup: wu.Supervisor) -> None:
    dream = sup.dream(my_priority)
    assert dream.id.startswith("d")
    assert tuple(dream.result(timeout=10)) == (SCHED_IDLE, 0)
    assert sup.get(dream.id).kind == "dream"
    policy, _ = sup.agent(my_priority).result(timeout=10)
    assert policy != SCHED_IDLE


@needs_sched_idle
def test_every_thread_of_a_dream_is_idle_on_a_warm_process_too(sup: wu.Supervisor) -> None:
    # A warm process starts its threads before it learns its unit is a dream.
    for _ in range(3):
        policies = sup.dream(policies_of_my_threads).result(timeout=10)
        assert len(policies) >= 2
        assert set(policies) == {SCHED_IDLE}


@needs_sched_idle
def test_the_kernel_sees_the_dream_as_idle(sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]) -> None:
    said, gate = fifos
    dream = sup.dream(report_pid_then_wait, said.path, gate.path)
    pid = int(said.wait())
    assert os.sched_getscheduler(pid) == SCHED_IDLE
    with open(f"/proc/{pid}/sched") as f:
        policy = next(line for line in f if line.startswith("policy"))
    assert int(policy.split(":")[1]) == SCHED_IDLE
    gate.send("done")
    assert dream.result(timeout=10) == "done"


def test_shed_kills_dreams_newest_first_and_spares_other_work(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    _, gate = fifos
    agent = sup.agent(wait_for_gate, gate.path)
    dreams = [sup.dream(wait_for_gate, gate.path, description=f"dream {i}") for i in range(3)]
    assert sup.shed(2) == [dreams[2].id, dreams[1].id]
    for d in dreams[1:]:
        record = d.wait(timeout=10)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.SHED)
        with pytest.raises(wu.WorkKilled, match="reason shed"):
            d.result()
    assert sup.get(dreams[0].id).status == wu.Status.RUNNING
    assert sup.shed() == [dreams[0].id]
    assert sup.shed() == []  # nothing left to shed; the agent is not a dream
    assert dreams[0].wait(timeout=10).reason == wu.Reason.SHED
    assert sup.get(agent.id).status == wu.Status.RUNNING
    gate.send("still here")
    assert agent.result(timeout=10) == "still here"


def test_shed_zero_and_bad_counts(sup: wu.Supervisor) -> None:
    assert sup.shed(0) == []
    for bad in (-1, True, 1.5):
        with pytest.raises(wu.SpecError, match="n must be"):
            sup.shed(bad)  # type: ignore[arg-type]


def dreamer() -> list[object]:
    ctx = wu.current()
    child = ctx.dream(my_priority)
    return [child.id, *child.result(timeout=10)]


@needs_sched_idle
def test_a_unit_starts_a_dream_child(sup: wu.Supervisor) -> None:
    child_id, policy, _ = sup.agent(dreamer).result(timeout=20)
    assert str(child_id).startswith("d")
    assert policy == SCHED_IDLE
    assert sup.get(str(child_id)).parent is not None


def test_result_async_and_wait_async_leave_the_loop_running(
    sup: wu.Supervisor, fifos: tuple[Fifo, Fifo]
) -> None:
    said, gate = fifos
    dream = sup.dream(report_pid_then_wait, said.path, gate.path)

    async def release() -> None:
        await asyncio.to_thread(said.wait)
        gate.send("released concurrently")  # runs only while the awaits below yield

    async def main() -> tuple[str, wu.Status]:
        releaser = asyncio.create_task(release())
        value = await sup.result_async(dream.id, timeout=10)
        record = await sup.wait_async(dream.id, timeout=10)
        await releaser
        return value, record.status

    assert asyncio.run(main()) == ("released concurrently", wu.Status.COMPLETED)
