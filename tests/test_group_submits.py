"""Submits that arrive together share one fully synced commit (``supervisor.actor.submits``).

Commits are counted from the ledger's own record of its COMMITs
(``Ledger.drain_commit_seconds``). To make a group deterministic, a test holds
the supervisor actor inside a request until every submit waits in its inbox,
with ticks off (a tick among them would commit the group early).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import workunits as wu
from tests.conftest import eventually
from tests.faults.diskfull import PageLimitFull, ledger_of
from workunits._core.record import WorkRecord
from workunits._wire.specs import ShellSpec
from workunits.supervisor.actor import requests as rq

LATER = 24 * 3600.0  # not_before: these units never start during a test


def _inbox_size(sup: wu.Supervisor) -> int:
    inbox = sup._machinery._ref.actor_inbox
    assert isinstance(inbox, queue.Queue)  # a ThreadingActor's
    return inbox.qsize()


@contextlib.contextmanager
def actor_held(sup: wu.Supervisor) -> Iterator[None]:
    """The supervisor actor busy inside one request until the block ends."""
    anchor = sup.shell(["true"], not_before=LATER).id
    held, release = threading.Event(), threading.Event()

    def hold(record: WorkRecord) -> WorkRecord:
        held.set()
        release.wait(30)
        return record  # the same object: no write

    holder = threading.Thread(target=lambda: sup._machinery.channel.ask(rq.Update(anchor, hold)))
    holder.start()
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(10)


def _together(
    sup: wu.Supervisor, calls: Sequence[Callable[[], wu.WorkHandle]]
) -> list[wu.WorkHandle | BaseException]:
    """Run ``calls`` in threads while the actor is held, so they queue as one group."""
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with actor_held(sup):
        for t in threads:
            t.start()
        eventually(lambda: _inbox_size(sup) >= len(calls), what="every submit in the inbox")
        ledger_of(sup).drain_commit_seconds()
    for t in threads:
        t.join(30)
    return out


def _rows(state: Path, ids: list[str]) -> set[str]:
    with contextlib.closing(sqlite3.connect(f"file:{state / 'ledger.db'}?mode=ro", uri=True)) as c:
        marks = ",".join("?" * len(ids))
        return {r[0] for r in c.execute(f"SELECT id FROM units WHERE id IN ({marks})", ids)}  # noqa: S608


def test_eight_submits_arriving_together_share_one_commit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, tick_interval=None, install_signal_handlers=False) as sup:
        calls = [lambda: sup.shell(["true"], not_before=LATER) for _ in range(8)]
        handles = _together(sup, calls)
        commits = len(ledger_of(sup).drain_commit_seconds())
        ids = [h.id for h in handles if isinstance(h, wu.WorkHandle)]
        assert len(set(ids)) == 8  # every caller its own unit
        assert commits == 1
        assert _rows(state, ids) == set(ids)  # durable before any caller was answered
        assert all(sup.get(i).status == wu.Status.PENDING for i in ids)


def test_eight_threads_submitting_at_once_pay_fewer_commits_than_submits(tmp_path: Path) -> None:
    state = tmp_path / "state"
    each = 25
    with wu.Supervisor(state, tick_interval=None, install_signal_handlers=False) as sup:
        start = threading.Barrier(8)
        ids: list[str] = []
        lock = threading.Lock()  # guards ids

        def caller() -> None:
            start.wait(10)
            mine = [sup.shell(["true"], not_before=LATER).id for _ in range(each)]
            with lock:
                ids.extend(mine)

        ledger_of(sup).drain_commit_seconds()
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        commits = len(ledger_of(sup).drain_commit_seconds())
        assert len(set(ids)) == 8 * each
        assert _rows(state, ids) == set(ids)
        assert commits < 8 * each


def test_a_key_taken_with_other_arguments_fails_only_its_caller(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state, tick_interval=None, install_signal_handlers=False) as sup:
        first = sup.shell(["echo", "a"], key="k", not_before=LATER)
        calls: list[Callable[[], wu.WorkHandle]] = [
            lambda: sup.shell(["true"], not_before=LATER),
            lambda: sup.shell(["echo", "b"], key="k", not_before=LATER),  # other arguments
            lambda: sup.shell(["echo", "a"], key="k", not_before=LATER),  # the same call
            lambda: sup.shell(["true"], key="fresh", not_before=LATER),
        ]
        out = _together(sup, calls)
        assert len(ledger_of(sup).drain_commit_seconds()) == 1  # they were one group
        assert isinstance(out[1], wu.IdempotencyConflict)
        assert first.id in str(out[1])
        fresh = [h for h in (out[0], out[3]) if isinstance(h, wu.WorkHandle)]
        assert len(fresh) == 2
        assert isinstance(out[2], wu.WorkHandle)
        assert out[2].id == first.id
        assert _rows(state, [h.id for h in fresh]) == {h.id for h in fresh}


def test_a_group_whose_commit_fails_fails_every_submit_and_starts_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    marks = [tmp_path / f"ran-{i}" for i in range(4)]
    filler = PageLimitFull()
    with wu.Supervisor(state, tick_interval=None, install_signal_handlers=False) as sup:
        filler.fill(ledger_of(sup))
        big = "a row that needs new pages " * 1000
        calls = [functools.partial(sup.shell, ["touch", str(m)], description=big) for m in marks]
        out = _together(sup, calls)
        assert all(isinstance(e, wu.LedgerFull) for e in out), out
        assert [r for r in sup.list() if r.description == big] == []  # none entered memory
        filler.free(ledger_of(sup))
        after = sup.shell(["true"])  # the disk has room again: submits work
        assert sup.wait(after.id, timeout=30).status == wu.Status.COMPLETED
        assert not any(m.exists() for m in marks)
        assert [r for r in sup.list() if r.description == big] == []


def test_async_submits_together_share_commits(tmp_path: Path) -> None:
    state = tmp_path / "state"
    n = 8

    async def main() -> tuple[list[str], int]:
        async with wu.Supervisor(state, tick_interval=None, install_signal_handlers=False) as sup:
            spec = ShellSpec.build(["true"], cwd=None, env=None, output_cap=1 << 20)
            await sup.submit_async("b", spec, not_before=LATER)  # the relay thread exists
            ledger_of(sup).drain_commit_seconds()
            handles = await asyncio.gather(
                *(sup.submit_async("b", spec, not_before=LATER) for _ in range(n))
            )
            return [h.id for h in handles], len(ledger_of(sup).drain_commit_seconds())

    ids, commits = asyncio.run(main())
    assert len(set(ids)) == n
    assert _rows(state, ids) == set(ids)
    assert commits < n


def test_a_client_s_submit_is_adopted_behind_many_delayed_units(tmp_path: Path) -> None:
    """The supervisor's own pending units are not what it adopts: they hid clients' submits."""
    state = tmp_path / "state"
    with wu.Supervisor(state, install_signal_handlers=False) as sup, wu.connect(state) as client:
        for _ in range(300):  # more than one tick's adoption batch (256), all older
            sup.shell(["true"], not_before=LATER)
        handle = client.shell(["true"])
        assert sup.wait(handle.id, timeout=30).status == wu.Status.COMPLETED
