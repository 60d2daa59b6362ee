"""``sup.executor()`` and ``sup.pool()`` as ``concurrent.futures.Executor``s (issue 41).

CPython's own executor cases run in ``test_executor_cpython_*.py``; these test
what is ours: the future carries its unit's ID, each task is a full unit, and
a cancel or an abandoned map ends units, never leaving them to run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import time
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.cpython.executor_cases import ADAPTED, SKIPPED

WAIT = 30.0


def square(x: int) -> int:
    return x * x


def touch_then_wait(mark: str, gate: str) -> str:
    """Leave ``mark`` (proof it ran), then wait for ``gate`` (bounded)."""
    Path(mark).touch()
    deadline = time.monotonic() + WAIT
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} never appeared")
        time.sleep(0.005)
    return mark


@pytest.mark.parametrize("reuse", [False, True], ids=["agents", "pool"])
def test_a_future_is_a_stdlib_future_carrying_its_units_id(sup: wu.Supervisor, reuse: bool) -> None:
    executor: wu.Pool | wu.AgentExecutor = sup.pool() if reuse else sup.executor(max_workers=2)
    assert isinstance(executor, cf.Executor)
    futures: list[wu.UnitFuture] = [executor.submit(square, i) for i in range(4)]
    assert all(isinstance(f, cf.Future) for f in futures)
    done = {f: f.result() for f in cf.as_completed(futures, timeout=WAIT)}
    assert [done[f] for f in futures] == [0, 1, 4, 9]
    assert len({f.id for f in futures}) == 4
    records = [sup.get(f.id) for f in futures]
    assert [r.status for r in records] == [wu.Status.COMPLETED] * 4
    assert all(r.kind == "agent" for r in records)
    assert futures[0].handle.get().id == futures[0].id

    async def on_a_loop() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        by_loop = await loop.run_in_executor(executor, square, 9)
        wrapped = await asyncio.wrap_future(executor.submit(square, 5))
        return by_loop, wrapped

    assert asyncio.run(on_a_loop()) == (81, 25)
    executor.shutdown()


def test_cancel_withdraws_a_unit_that_has_not_started_and_it_never_runs(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    with sup.executor(max_workers=1) as executor:
        first = executor.submit(touch_then_wait, str(tmp_path / "first"), gate)
        second = executor.submit(touch_then_wait, str(tmp_path / "second"), gate)
        eventually((tmp_path / "first").exists, what="the first to run")
        assert sup.get(second.id).status is wu.Status.PENDING  # the executor is full
        assert second.cancel()
        assert second.cancelled()
        assert not first.cancel()  # it runs: as the stdlib says, too late
        record = sup.wait(second.id, timeout=WAIT)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
        Path(gate).touch()
        done, _ = cf.wait([first, second], timeout=WAIT)
        assert done == {first, second}
    assert first.result() == str(tmp_path / "first")
    assert not (tmp_path / "second").exists()
    with pytest.raises(cf.CancelledError):
        second.result()


def test_shutdown_cancel_futures_ends_the_waiting_units_and_lets_the_rest_finish(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    executor = sup.executor(max_workers=2)
    futures = [executor.submit(touch_then_wait, str(tmp_path / f"m{i}"), gate) for i in range(6)]
    eventually(lambda: len(list(tmp_path.glob("m*"))) == 2, what="two running")
    Path(gate).touch()
    executor.shutdown(wait=True, cancel_futures=True)
    assert all(f.done() for f in futures)
    cancelled = [f for f in futures if f.cancelled()]
    assert 1 <= len(cancelled) <= 4
    assert all(sup.get(f.id).reason == wu.Reason.CANCELLED for f in cancelled)
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        executor.submit(square, 1)
    assert sup.executor().submit(square, 2).result(timeout=WAIT) == 4  # the supervisor runs on


def test_leaving_a_map_early_kills_the_units_not_read(sup: wu.Supervisor, tmp_path: Path) -> None:
    gate = str(tmp_path / "gate")
    marks = [str(tmp_path / f"m{i}") for i in range(4)]
    Path(gate).touch()
    results = sup.executor(max_workers=1).map(touch_then_wait, marks, [gate, "never", gate, gate])
    assert next(results) == marks[0]
    eventually(lambda: os.path.exists(marks[1]), what="the second unit to run")
    results.close()  # as a ``break`` does
    units = sorted(sup.list(kind="agent"), key=lambda r: r.created_at)
    ends = [sup.wait(r.id, timeout=WAIT) for r in units]
    assert [e.status for e in ends] == [wu.Status.COMPLETED] + [wu.Status.KILLED] * 3
    assert not os.path.exists(marks[2])  # withdrawn before it ran


def test_a_failed_task_raises_its_own_exception_and_a_crash_raises_work_failed(
    sup: wu.Supervisor,
) -> None:
    executor = sup.executor()
    with pytest.raises(ZeroDivisionError) as raised:
        executor.submit(divmod, 1, 0).result(timeout=WAIT)
    assert any("raised in unit a" in note for note in raised.value.__notes__)
    crashed = executor.submit(os._exit, 3)
    error = crashed.exception(timeout=WAIT)
    assert isinstance(error, wu.WorkFailed)
    assert error.record.exit_code == 3
    killed = executor.submit(time.sleep, WAIT)
    eventually(lambda: sup.get(killed.id).status is wu.Status.RUNNING, what="it to run")
    killed.handle.kill()
    assert isinstance(killed.exception(timeout=WAIT), wu.WorkKilled)


def test_max_workers_and_chunksize_are_checked(sup: wu.Supervisor) -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_workers must be greater than 0"):
            sup.executor(max_workers=bad)
        with pytest.raises(ValueError, match="max_workers must be greater than 0"):
            sup.pool(max_workers=bad)
    with pytest.raises(ValueError, match="chunksize must be >= 1"):
        sup.executor().map(square, [1], chunksize=0)
    assert list(sup.executor().map(square, range(4), chunksize=3)) == [0, 1, 4, 9]
    assert len(sup.list(kind="agent")) == 4  # each item its own unit


def test_the_guide_lists_every_adapted_and_skipped_cpython_case() -> None:
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "batches.md").read_text()
    for name in [*ADAPTED, *SKIPPED]:
        assert f"`{name}`" in guide, name
