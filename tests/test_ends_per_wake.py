"""Ends heard of in one wake of the Reaper travel to the supervisor as one message.

The Reaper's ``after_wake`` runs a callback once every event of the wake it was
asked in has been handled; ``EndsPerWake`` uses it so that the ends of several
processes the kernel reported together reach the supervisor as one
``EndReports`` (one message, one commit), while an end reported on any other
thread is told at once. Nothing here sleeps to synchronise: the Reaper is held
inside a callback while the test lines up what its next wake will see.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import eventually
from workunits._core.record import Outcome
from workunits._core.status import Status
from workunits._zygote.reaper import Reaper
from workunits.supervisor.actor.endings import (
    EndReport,
    EndReports,
    EndsPerWake,
    TerminalTransition,
)

WAIT = 10.0


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    reaper = Reaper()
    yield reaper
    reaper.close()


class Held:
    """A stream whose first chunk holds the Reaper thread until ``release``."""

    def __init__(self, reaper: Reaper) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.inside = threading.Event()
        self._gate = threading.Event()
        reaper.watch_stream(self.ours, self._on_data, lambda: None)

    def _on_data(self, data: bytes, fds: list[int]) -> None:
        self.inside.set()
        assert self._gate.wait(WAIT)

    def hold(self) -> None:
        self.theirs.sendall(b"x")
        assert self.inside.wait(WAIT), "the Reaper never read the holding stream"

    def release(self) -> None:
        self._gate.set()

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


class Stream:
    """A watched socketpair whose every chunk calls ``on_chunk`` on the Reaper thread."""

    def __init__(self, reaper: Reaper, on_chunk: Callable[[bytes], None]) -> None:
        self.ours, self.theirs = socket.socketpair()
        reaper.watch_stream(self.ours, lambda data, fds: on_chunk(data), lambda: None)

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


@pytest.mark.timeout(30)
def test_after_wake_runs_once_after_every_event_of_its_wake(reaper: Reaper) -> None:
    seen: list[str] = []
    done = threading.Event()

    def after() -> None:
        seen.append("after")
        done.set()

    def chunk(name: str) -> Callable[[bytes], None]:
        def on_chunk(data: bytes) -> None:
            seen.append(name)
            if len(seen) == 1:
                reaper.after_wake(after)

        return on_chunk

    held = Held(reaper)
    held.hold()
    streams = [Stream(reaper, chunk(name)) for name in ("a", "b", "c")]
    for stream in streams:
        stream.theirs.sendall(b"ready before the wake")
    held.release()  # the next wake finds the three streams ready at once
    assert done.wait(WAIT)
    assert sorted(seen[:3]) == ["a", "b", "c"]
    assert seen[3:] == ["after"]
    held.close()
    for stream in streams:
        stream.close()


def test_after_wake_is_refused_outside_the_reaper_thread(reaper: Reaper) -> None:
    with pytest.raises(RuntimeError, match="Reaper thread"):
        reaper.after_wake(lambda: None)


@pytest.mark.timeout(30)
def test_ends_reported_in_one_wake_are_told_as_one_message(reaper: Reaper) -> None:
    told: queue.Queue[object] = queue.Queue()
    report = EndsPerWake(reaper, told.put)
    ok = Outcome(Status.COMPLETED, exit_code=0)

    def two_ends(data: bytes) -> None:  # as the zygote's stream does for two exits in a chunk
        report("b00000001", ok)
        report("b00000002", Outcome(Status.FAILED, exit_code=3))

    stream = Stream(reaper, two_ends)
    stream.theirs.sendall(b"two exits")
    message = told.get(timeout=WAIT)
    assert isinstance(message, EndReports)
    assert [(e.work_id, e.outcome.status) for e in message.ends] == [
        ("b00000001", Status.COMPLETED),
        ("b00000002", Status.FAILED),
    ]

    def one_end(data: bytes) -> None:
        report("b00000003", ok)

    lone = Stream(reaper, one_end)
    lone.theirs.sendall(b"one exit")
    assert told.get(timeout=WAIT) == EndReport("b00000003", ok)  # alone: as it always was

    report("a00000004", ok)  # a unit's actor thread: told at once, nothing waits for a wake
    assert told.get_nowait() == EndReport("a00000004", ok)
    assert told.empty()
    stream.close()
    lone.close()


@pytest.mark.timeout(60)
def test_shells_that_end_while_the_reaper_is_busy_all_land_with_one_notice_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[list[str]] = []
    original = TerminalTransition.report_group

    def spy(self: TerminalTransition, ends: list[tuple[str, Outcome]]) -> None:
        groups.append([work_id for work_id, _ in ends])
        original(self, ends)

    monkeypatch.setattr(TerminalTransition, "report_group", spy)
    go = tmp_path / "go"
    wait_for_go = f"while [ ! -e '{go}' ]; do sleep 0.01; done"
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        inbox = sup.notifications()
        units = [sup.shell(wait_for_go) for _ in range(3)]
        pids = [_pid_of(sup, unit.id) for unit in units]
        held = Held(sup._machinery.reaper)
        held.hold()
        try:
            go.touch()

            def all_exited() -> bool:
                return not any(Path(f"/proc/{pid}").exists() for pid in pids)

            eventually(all_exited, what="the three shells to exit")
            assert all(sup.get(u.id).status == Status.RUNNING for u in units)  # not heard yet
        finally:
            held.release()
        for unit in units:
            record = sup.wait(unit.id, timeout=WAIT)
            assert (record.status, record.exit_code, record.durable) == (
                Status.COMPLETED,
                0,
                True,
            )
        got = sorted(inbox.get(timeout=WAIT).id for _ in units)
        assert got == sorted(u.id for u in units)
        assert inbox.get_nowait() is None  # one notice each
        # However the zygote's reports were cut into the Reaper's reads, no end came twice.
        grouped = [w for group in groups for w in group]
        assert len(grouped) == len(set(grouped))
        held.close()


def _pid_of(sup: wu.Supervisor, work_id: str) -> int:
    return eventually(lambda: sup.get(work_id).pid, what=f"the pid of {work_id}")
