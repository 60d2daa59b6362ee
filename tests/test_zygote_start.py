"""A zygote starts outside the lock the Reaper needs: a slow start blocks only its waiters.

The zygote imports its preload modules before it answers the handshake, so a
preload module that blocks on a FIFO holds the start for as long as the test
likes, with real processes on both sides.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import alive, eventually
from workunits._zygote.client import ZygoteClient, ZygoteUnavailable
from workunits._zygote.reaper import Reaper

BOUND = 2.0  # seconds a call that needs only the lock may take, on a loaded machine

# Imported by the zygote: say so, then wait for the test to let the start go on.
SLOW_PRELOAD = """
import os
from pathlib import Path

gate = Path(os.environ["WORKUNITS_TEST_GATE"])
gate.with_suffix(".importing").write_text(str(os.getpid()))
with open(gate) as fifo:  # blocks until the test opens the FIFO for writing
    fifo.read()
"""


class Gate:
    """Holds a zygote's handshake until ``release``."""

    def __init__(self, directory: Path) -> None:
        self.fifo = directory / "gate"
        os.mkfifo(self.fifo)
        self.importing = self.fifo.with_suffix(".importing")

    def zygote_pid(self) -> int:
        """Wait until the zygote is inside its slow import; its pid."""

        def pid_written() -> str | None:
            return self.importing.read_text() if self.importing.exists() else None

        return int(eventually(pid_written, what="the zygote to reach its preload"))

    def release(self) -> None:
        # Opening for writing wakes the reader; closing gives it end of file.
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gate:
    (tmp_path / "slow_preload.py").write_text(SLOW_PRELOAD)
    monkeypatch.syspath_prepend(str(tmp_path))  # the zygote inherits our import path
    g = Gate(tmp_path)
    monkeypatch.setenv("WORKUNITS_TEST_GATE", str(g.fifo))
    return g


@pytest.fixture
def client() -> Iterator[ZygoteClient]:
    reaper = Reaper()
    zygotes = ZygoteClient(reaper, preload=["slow_preload"])
    yield zygotes
    zygotes.close()
    reaper.close()


def run_bounded(fn: object, what: str) -> None:
    """Run ``fn`` in a thread; fail unless it returns within BOUND seconds."""
    assert callable(fn)
    done = threading.Event()

    def call() -> None:
        fn()
        done.set()

    threading.Thread(target=call, name="bounded-call", daemon=True).start()
    assert done.wait(BOUND), f"{what} blocked behind the zygote's start"


def test_a_slow_zygote_start_does_not_hold_the_lock(client: ZygoteClient, gate: Gate) -> None:
    started = threading.Event()
    errors: list[BaseException] = []

    def start() -> None:
        try:
            client.start()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        started.set()

    threading.Thread(target=start, name="zygote-starter", daemon=True).start()
    gate.zygote_pid()
    # signal() takes the client's lock just as the Reaper does for every event it routes.
    run_bounded(lambda: client.signal("b00000000", 15), "a signal")
    assert not started.is_set()
    gate.release()
    assert started.wait(30)
    assert errors == []
    assert client.pid is not None


def test_start_quietly_returns_at_once_and_close_ends_the_slow_start(
    client: ZygoteClient, gate: Gate
) -> None:
    run_bounded(client.start_quietly, "start_quietly")
    pid = gate.zygote_pid()
    warmer = client._warmer
    assert warmer is not None
    assert warmer.daemon
    run_bounded(client.close, "close during a start")
    assert not warmer.is_alive()
    eventually(lambda: not alive(pid), what="the half-started zygote to be gone")
    with pytest.raises(ZygoteUnavailable, match="closed"):
        client.start()


def test_callers_during_a_start_share_one_zygote(client: ZygoteClient, gate: Gate) -> None:
    pids: list[int | None] = []
    lock = threading.Lock()

    def start() -> None:
        client.start()
        with lock:
            pids.append(client.pid)

    threads = [threading.Thread(target=start, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    zygote = gate.zygote_pid()
    gate.release()
    for thread in threads:
        thread.join(30)
    assert pids == [zygote] * 3


@pytest.mark.timeout(90)
def test_shells_submitted_while_the_zygote_starts_run_once_it_is_up(
    tmp_path: Path, gate: Gate
) -> None:
    """A shell's launch that must wait for the zygote waits off the supervisor's thread;
    a kill sent meanwhile is handled once the launch is done, and ends the unit."""
    with wu.Supervisor(
        tmp_path / "state", preload=["slow_preload"], install_signal_handlers=False
    ) as sup:
        gate.zygote_pid()  # the zygote is in its slow import
        ran = sup.shell(["true"])
        killed = sup.shell(["sleep", "600"])
        assert sup.get(ran.id).status is wu.Status.RUNNING  # the supervisor answers meanwhile
        assert sup.kill(killed.id) is True
        gate.release()
        assert sup.wait(ran.id, timeout=30).status is wu.Status.COMPLETED
        record = sup.wait(killed.id, timeout=30)
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.KILLED)
