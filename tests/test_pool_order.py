"""Pooled units run in the order they were started, whichever reaches the pool first.

Each pooled unit hands itself to the pool from its own actor's thread, so units
started together arrive in any order; their places are reserved in start order
on the supervisor's thread. Here the pool is driven directly, with a real
zygote and real workers, and the arrivals are put out of order on purpose.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from workunits._core import ids
from workunits._pool.workers import WorkerPool
from workunits._wire.specs import AgentSpec
from workunits._wire.zygote_protocol import SpawnCall
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper

WAIT = 30.0


def note(path: str, name: str) -> str:
    """A unit body: say that it ran, in order of running."""
    with open(path, "a", encoding="utf-8") as log:
        log.write(name + "\n")
    return name


class Events:
    """A unit's ``UnitEvents``: sets ``ended`` at its end."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.exit: tuple[int | None, int | None] | None = None

    def spawned(self, pid: int, pidfd: int) -> None:
        os.close(pidfd)

    def spawn_failed(self, error: str) -> None:
        self.exit = (None, None)
        self.ended.set()

    def exited(self, exit_code: int | None, signum: int | None, limit: str | None = None) -> None:
        self.exit = (exit_code, signum)
        self.ended.set()

    def lost(self) -> None:
        self.spawn_failed("lost")

    def kill(self) -> None:
        """Nothing to do: the pool kills its worker through its own pidfd."""


class Unit:
    """One pooled unit's call, transcript and channel, as an agent actor makes them."""

    def __init__(self, pool: WorkerPool, directory: Path, log: Path, name: str) -> None:
        self.pool = pool
        self.id = ids.mint("a")
        spec = AgentSpec.build(note, (str(log), name), {})
        self.call = SpawnCall(unit_id=self.id, kind="agent", payload=spec.payload)
        self.transcript = directory / f"{self.id}.jsonl"
        self.events = Events()

    def run(self) -> None:
        """What the unit's actor does on its own thread: hand the unit to the pool."""
        fd = os.open(self.transcript, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pool.run(self.call, fd, theirs.detach(), self.events)  # both the pool's now
        self.channel = ours  # kept open until the unit ends, as its actor keeps it

    def ended(self) -> tuple[int | None, int | None] | None:
        assert self.events.ended.wait(WAIT), f"{self.id} did not end"
        self.channel.close()
        return self.events.exit


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    reaper = Reaper()
    zygote = ZygoteClient(reaper)
    pool = WorkerPool(zygote, reaper, size=1)
    yield pool
    pool.close()
    zygote.close()
    reaper.close()


def test_units_run_in_the_order_their_places_were_reserved(
    pool: WorkerPool, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    first, second, third = (Unit(pool, tmp_path, log, n) for n in ("first", "second", "third"))
    for unit in (first, second, third):
        pool.reserve(unit.id)  # the supervisor's thread, in start order
    third.run()  # their own threads arrive in another order
    second.run()
    first.run()
    assert [u.ended() for u in (first, second, third)] == [(0, None)] * 3
    assert log.read_text().split() == ["first", "second", "third"]


def test_a_place_given_up_does_not_hold_the_units_behind_it(
    pool: WorkerPool, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    failed, behind = Unit(pool, tmp_path, log, "failed"), Unit(pool, tmp_path, log, "behind")
    pool.reserve(failed.id)
    pool.reserve(behind.id)
    behind.run()  # arrives; waits for the place before it
    pool.withdraw(failed.id)  # that unit's launch failed before it reached the pool
    assert behind.ended() == (0, None)
    assert log.read_text().split() == ["behind"]


def test_a_unit_that_was_not_reserved_queues_from_its_arrival(
    pool: WorkerPool, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    reserved, unreserved = Unit(pool, tmp_path, log, "reserved"), Unit(pool, tmp_path, log, "x")
    pool.reserve(reserved.id)
    unreserved.run()
    reserved.run()
    assert [reserved.ended(), unreserved.ended()] == [(0, None)] * 2
    assert log.read_text().split() == ["reserved", "x"]
