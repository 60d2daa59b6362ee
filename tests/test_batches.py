"""Batches through the supervisor: ``submit_many``, ``sup.map``, ``pool().map`` (issue 41).

A batch travels as one request, is checked whole before anything is written,
is written in one transaction, and runs at most ``max_workers`` at once; every
unit of it stays a full unit (its ID, row, notice, kill and crash).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from tests.faults.diskfull import ledger_of

WAIT = 30.0


def square(x: int) -> int:
    return x * x


def gated(gate: str, x: int) -> int:
    """Wait for ``gate`` to exist (bounded), then return ``x``."""
    deadline = time.monotonic() + WAIT
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} never appeared")
        time.sleep(0.005)
    return x


def crash(code: int) -> None:
    os._exit(code)


def span(log: str, x: int) -> int:
    """Note when this call ran (system-wide monotonic clock), for the overlap count."""
    start = time.monotonic()
    time.sleep(0.15)
    with open(log, "a") as f:
        f.write(f"{start} {time.monotonic()}\n")
    return x


def most_at_once(log: Path) -> int:
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


@pytest.fixture
def quiet_sup(state_dir: Path) -> Iterator[wu.Supervisor]:
    """No ticks: only the batch's own writes reach the ledger while a test counts commits."""
    with wu.Supervisor(state_dir, tick_interval=None, install_signal_handlers=False) as sup:
        yield sup


def test_a_batch_is_written_in_one_commit_and_each_item_is_a_unit(
    quiet_sup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    ledger_of(quiet_sup).drain_commit_seconds()
    handles = quiet_sup.submit_many(
        [wu.AgentCall(gated, (gate, i)) for i in range(20)], max_workers=3
    )
    assert len(ledger_of(quiet_sup).drain_commit_seconds()) == 1
    assert len({h.id for h in handles}) == 20
    statuses = [quiet_sup.get(h.id).status for h in handles]
    assert statuses.count(wu.Status.RUNNING) == 3  # the batch's limit; the rest wait
    assert statuses.count(wu.Status.PENDING) == 17
    Path(gate).touch()
    assert [h.result(timeout=WAIT) for h in handles] == list(range(20))
    mailbox = quiet_sup.notifications()
    notices = [mailbox.get(timeout=WAIT) for _ in range(20)]
    assert sorted(n.id for n in notices) == sorted(h.id for h in handles)  # one each


def test_a_bad_item_fails_the_whole_batch_naming_it_and_nothing_is_written(
    sup: wu.Supervisor,
) -> None:
    calls = [wu.AgentCall(square, (1,)), wu.AgentCall(square, (2,))]
    calls.append(wu.AgentCall(square, (threading_lock(),)))
    with pytest.raises(wu.SpecError, match=r"^item 2 of the batch: cannot pickle"):
        sup.submit_many(calls)
    with pytest.raises(wu.WrongType, match=r"item 1 of the batch: submit_many takes wu\.AgentCall"):
        sup.submit_many([wu.AgentCall(square, (1,)), (square, 2)])  # type: ignore[list-item]
    # Checked by the supervisor (the options): still before anything is written.
    with pytest.raises(wu.SpecError, match="item 1 of the batch: key must be a non-empty str"):
        sup.submit_many([wu.AgentCall(square, (1,)), wu.AgentCall(square, (2,), key="")])
    assert sup.list() == []


def threading_lock() -> object:
    return threading.Lock()  # cannot be pickled for the unit's process


def test_a_key_conflict_fails_only_its_item(sup: wu.Supervisor) -> None:
    first = sup.agent(square, 3, key="k1")
    again = sup.submit_many([wu.AgentCall(square, (3,), key="k1")])
    assert [h.id for h in again] == [first.id]  # the same key and call: the same unit
    with pytest.raises(wu.BatchItemsFailed, match="1 of 3 items") as raised:
        sup.submit_many(
            [
                wu.AgentCall(square, (4,)),
                wu.AgentCall(square, (5,), key="k1"),  # taken with other arguments
                wu.AgentCall(square, (6,), key="k2"),
            ]
        )
    results = raised.value.results
    assert isinstance(results[1], wu.IdempotencyConflict)
    assert list(raised.value.errors) == [1]
    ran = [r for r in results if isinstance(r, wu.WorkHandle)]
    assert [h.result(timeout=WAIT) for h in ran] == [16, 36]


def test_a_kill_and_a_crash_inside_a_batch_end_only_their_units(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    calls = [wu.AgentCall(gated, (gate, i)) for i in range(4)]
    calls.insert(2, wu.AgentCall(crash, (7,)))
    handles = sup.submit_many(calls)
    eventually(lambda: sup.get(handles[0].id).status is wu.Status.RUNNING, what="a start")
    assert handles[0].kill()
    assert sup.wait(handles[2].id, timeout=WAIT).exit_code == 7
    Path(gate).touch()
    ends = [sup.wait(h.id, timeout=WAIT) for h in handles]
    assert [e.status for e in ends] == [
        wu.Status.KILLED,
        wu.Status.COMPLETED,
        wu.Status.FAILED,
        wu.Status.COMPLETED,
        wu.Status.COMPLETED,
    ]
    assert [h.result(timeout=WAIT) for h in (handles[1], handles[3], handles[4])] == [1, 2, 3]
    mailbox = sup.notifications()
    assert sorted(mailbox.get(timeout=WAIT).id for _ in handles) == sorted(h.id for h in handles)


def test_a_map_runs_at_most_max_workers_at_once_and_in_order(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    log = tmp_path / "spans"
    assert list(sup.map(span, [str(log)] * 6, range(6), max_workers=2, timeout=WAIT)) == list(
        range(6)
    )
    assert most_at_once(log) <= 2
    assert len(sup.list(kind="agent")) == 6


def test_a_pool_map_is_one_batch_of_pooled_units(sup: wu.Supervisor) -> None:
    assert list(sup.pool().map(square, range(50), timeout=WAIT)) == [i * i for i in range(50)]
    assert list(sup.map(square, range(5), reuse=True, timeout=WAIT)) == [0, 1, 4, 9, 16]
    units = sup.list(kind="agent")
    assert len(units) == 55
    # The pool's two workers ran them all. (A pooled unit that ends before its pid's
    # report is applied keeps none in its record, on main before batches too.)
    pids = {r.pid for r in units} - {None}
    assert len(pids) <= 2, pids


def test_a_single_unit_is_not_held_back_by_a_running_batch(
    sup: wu.Supervisor, tmp_path: Path
) -> None:
    gate = str(tmp_path / "gate")
    batch = sup.submit_many([wu.AgentCall(gated, (gate, i)) for i in range(8)], max_workers=1)
    alone = sup.agent(square, 12)  # outside the batch: its limit does not hold it
    assert alone.result(timeout=WAIT) == 144
    assert sum(sup.get(h.id).status is wu.Status.PENDING for h in batch) == 7
    Path(gate).touch()
    assert [h.result(timeout=WAIT) for h in batch] == list(range(8))


def test_a_batch_on_a_postgresql_ledger(postgres_url: str, state_dir: Path) -> None:
    with wu.Supervisor(state_dir, ledger=postgres_url, install_signal_handlers=False) as sup:
        handles = sup.submit_many([wu.AgentCall(square, (i,)) for i in range(10)], max_workers=2)
        assert [h.result(timeout=WAIT) for h in handles] == [i * i for i in range(10)]
        assert list(sup.pool().map(square, range(10), timeout=WAIT)) == [i * i for i in range(10)]
        with pytest.raises(wu.BatchItemsFailed):
            sup.submit_many(
                [wu.AgentCall(square, (1,), key="p"), wu.AgentCall(square, (2,), key="p")]
            )


def leaf(x: int) -> int:
    return x + 1


def fan_out(n: int) -> list[int]:
    """A unit that maps ``leaf`` over ``range(n)`` as its children, one batch."""
    return list(wu.current().map(leaf, range(n), max_workers=2, timeout=WAIT))


def fan_out_checked(n: int) -> str:
    """A unit whose batches of children fail: a bad item, then a key taken with other args."""
    ctx = wu.current()
    out = []
    try:
        ctx.submit_many([wu.AgentCall(leaf, (1,)), wu.AgentCall(leaf, (threading.Lock(),))])
    except wu.SpecError as exc:
        out.append(str(exc).split(":")[0])
    first = ctx.submit_many([wu.AgentCall(leaf, (1,), key="k")])
    try:
        ctx.submit_many([wu.AgentCall(leaf, (2,)), wu.AgentCall(leaf, (3,), key="k")])
    except wu.BatchItemsFailed as exc:
        out.append(f"{sorted(exc.errors)} {type(exc.results[0]).__name__}")
    out.append(str(ctx.result(first[0], timeout=WAIT)))
    return "; ".join(out)


def test_a_unit_maps_its_children_as_one_batch(sup: wu.Supervisor) -> None:
    parent = sup.agent(fan_out, 12)
    assert parent.result(timeout=WAIT) == list(range(1, 13))
    children = sup.list(parent=parent.id)
    assert len(children) == 12
    assert all(c.status is wu.Status.COMPLETED for c in children)
    checked = sup.agent(fan_out_checked, 0)
    assert checked.result(timeout=WAIT) == "item 1 of the batch; [1] ChildHandle; 2"
    assert len(sup.list(parent=checked.id)) == 2  # the bad batch wrote nothing


def test_a_clients_batch_is_one_transaction_and_runs_in_order(
    sup: wu.Supervisor, state_dir: Path
) -> None:
    with wu.connect(state_dir) as client:
        assert list(client.map(square, range(6), timeout=WAIT)) == [i * i for i in range(6)]
        handles = client.submit_many(
            [wu.AgentCall(square, (i,), key=f"c{i}") for i in range(3)]
            + [wu.AgentCall("tests.test_batches:square", (7,))]
        )
        assert [client.result(h.id, timeout=WAIT) for h in handles] == [0, 1, 4, 49]
        again = client.submit_many([wu.AgentCall(square, (1,), key="c1")])
        assert (again[0].id, again[0].created) == (handles[1].id, False)
        before = len(sup.list())
        with pytest.raises(wu.SpecError, match="item 1 of the batch: key must be"):
            client.submit_many([wu.AgentCall(square, (1,)), wu.AgentCall(square, (2,), key="")])
        with pytest.raises(wu.BatchItemsFailed) as raised:
            client.submit_many([wu.AgentCall(square, (5,)), wu.AgentCall(square, (9,), key="c1")])
        assert list(raised.value.errors) == [1]
        assert isinstance(raised.value.errors[1], wu.IdempotencyConflict)
        assert len(sup.list()) == before + 1  # the bad batch wrote nothing; the conflict, itself


def test_the_async_twins_of_a_batch(sup: wu.Supervisor) -> None:
    async def main() -> tuple[list[int], list[int]]:
        mapped = [v async for v in sup.map_async(square, range(5), timeout=WAIT)]
        handles = await sup.submit_many_async([wu.AgentCall(square, (i,)) for i in range(3)])
        return mapped, [await h.result_async(timeout=WAIT) for h in handles]

    assert asyncio.run(main()) == ([0, 1, 4, 9, 16], [0, 1, 4])
