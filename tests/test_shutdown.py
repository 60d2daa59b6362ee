"""Nothing outlives the supervisor unasked (invariant 10): close(), signals, atexit."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pykka
import pytest

from tests.helpers import (
    WAIT,
    as_notice,
    children_of_this_process,
    first_int,
    kill_if_alive,
    process_gone,
    read_until,
)
from workunits import Reason, Status, Supervisor, SupervisorClosed, WorkActor, connect
from workunits.testing import ScriptedDriver

CHILD = Path(__file__).with_name("supervised_child.py")


def open_fds() -> dict[int, str]:
    fds: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
    return fds


def test_close_kills_running_units_with_reason_shutdown(state_dir: Path) -> None:
    sup = Supervisor(state_dir, install_signal_handlers=False)
    drive = ScriptedDriver(sup)
    mailbox = sup.notifications()
    sleepers = [sup.shell("echo $$; exec sleep 30") for _ in range(3)]
    pids = [first_int(read_until(sup, u.id, b"\n")) for u in sleepers]
    scripted = drive.start()
    finished = sup.shell("true")
    sup.wait(finished.id, WAIT)
    sup.close()
    notices = {n.id: n for n in map(as_notice, mailbox)}
    assert set(notices) == {u.id for u in [*sleepers, scripted, finished]}
    for unit in [*sleepers, scripted]:
        assert (notices[unit.id].status, notices[unit.id].reason) == (
            Status.KILLED,
            Reason.SHUTDOWN,
        )
    assert notices[finished.id].status == Status.COMPLETED
    for pid in pids:
        assert process_gone(pid)
    assert not set(pids) & children_of_this_process(), "close() left a zombie"


def test_close_ends_every_pending_unit_killed_in_one_commit(state_dir: Path) -> None:
    later = time.time() + 3600
    # No ticker: a tick's own commits (claims, requests) must not count as the close's.
    sup = Supervisor(state_dir, install_signal_handlers=False, tick_interval=None)
    pending = [sup.shell(["true"], not_before=later).id for _ in range(40)]
    ledger = sup._machinery.ledger
    ledger.drain_commit_seconds()  # SQLite's COMMITs so far, timed; drained
    sup.close()
    # The ends of the 40, and the session's close: not one commit per unit.
    assert len(ledger.drain_commit_seconds()) <= 3
    with connect(state_dir) as client:
        ends = {(r.status, r.reason) for r in client.list() if r.id in pending}
    assert ends == {(Status.KILLED, Reason.SHUTDOWN)}


def test_close_is_idempotent_and_later_calls_say_closed(state_dir: Path) -> None:
    with Supervisor(state_dir, install_signal_handlers=False) as sup:
        unit = sup.shell(["sleep", "30"])
        sup.close()
        sup.close()
    sup.close()
    with pytest.raises(SupervisorClosed):
        sup.get(unit.id)
    with pytest.raises(SupervisorClosed):
        sup.shell("true")
    with pytest.raises(SupervisorClosed):
        sup.kill(unit.id)


def test_close_leaves_no_threads_actors_children_or_descriptors(state_dir: Path) -> None:
    # Warm up once: the first supervisor raises the fd limit and imports lazily.
    Supervisor(state_dir / "warm-up", install_signal_handlers=False).close()
    threads_before = set(threading.enumerate())
    fds_before = open_fds()

    sup = Supervisor(state_dir / "sup", install_signal_handlers=False)
    drive = ScriptedDriver(sup)
    running = sup.shell("echo $$; exec sleep 30")
    pid = first_int(read_until(sup, running.id, b"\n"))  # holds a read descriptor now
    done = sup.shell("echo done")
    sup.wait(done.id, WAIT)
    scripted = drive.start()
    drive.write(scripted.id, b"partial")
    stream = sup.stream(scripted.id)
    assert next(stream) == b"partial"  # a retained reader, left open over close()
    sup.close()

    new_threads = set(threading.enumerate()) - threads_before
    for thread in new_threads:
        thread.join(WAIT)
    assert [t.name for t in new_threads if t.is_alive()] == []
    for ref in pykka.ActorRegistry.get_all():
        ref.actor_stopped.wait(WAIT)
    assert pykka.ActorRegistry.get_all() == []
    assert process_gone(pid)
    assert pid not in children_of_this_process()
    assert open_fds() == fds_before
    stream.close()


class Stubborn(WorkActor):
    """A kind whose work ignores every signal: close() must not wait forever for it."""

    kind: ClassVar[str] = "stubborn"

    def launch(self) -> None:
        pass

    def signal_work(self, signum: int) -> None:
        pass


def test_close_records_units_that_do_not_end_within_the_grace(state_dir: Path) -> None:
    sup = Supervisor(state_dir, shutdown_grace=0.1, install_signal_handlers=False)
    sup.register_kind("h", Stubborn)
    mailbox = sup.notifications()
    unit = sup.submit("h", None)
    sup.close()
    notice = as_notice(mailbox.get(timeout=0))
    assert (notice.id, notice.status, notice.reason) == (unit.id, Status.KILLED, Reason.SHUTDOWN)
    assert notice.error == "did not exit within the shutdown grace"


# -- a supervising program that is signalled, exits, or crashes --------------------


class Child:
    """A ``supervised_child.py`` process and the pid of its unit."""

    def __init__(self, proc: subprocess.Popen[str], unit_pid: int) -> None:
        self.proc = proc
        self.unit_pid = unit_pid


@pytest.fixture
def spawn(state_dir: Path) -> Iterator[Any]:
    children: list[Child] = []

    def start(mode: str, ignoring: str = "") -> Child:
        argv = [sys.executable, str(CHILD), str(state_dir), mode]
        if ignoring:  # as `nohup cmd &` starts it: the ignore is inherited across exec
            argv = ["sh", "-c", f"trap '' {ignoring}; exec \"$@\"", "sh", *argv]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], WAIT)
        line = proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            proc.kill()
            _, err = proc.communicate(timeout=WAIT)
            raise AssertionError(f"the child did not report its unit: {line!r} {err}")
        child = Child(proc, int(line))
        children.append(child)
        return child

    yield start
    for child in children:
        kill_if_alive(child.unit_pid)  # only matters when the test failed
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.communicate(timeout=WAIT)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminating_signal_kills_the_units_and_still_terminates(
    spawn: Any, signum: signal.Signals
) -> None:
    child = spawn("pause")
    child.proc.send_signal(signum)
    assert child.proc.wait(WAIT) == -signum, "the default action must still happen"
    assert process_gone(child.unit_pid), "the unit outlived its supervisor"


def test_sigint_kills_the_units_and_raises_keyboard_interrupt(spawn: Any) -> None:
    child = spawn("pause")
    child.proc.send_signal(signal.SIGINT)
    _, err = child.proc.communicate(timeout=WAIT)
    assert child.proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert process_gone(child.unit_pid)


def test_a_signal_landing_while_the_program_holds_a_lock_the_close_needs_does_not_hang(
    spawn: Any,
) -> None:
    # The handler only wakes the cleanup thread: run in the interrupted thread, the
    # close would wait forever for a lock that thread holds.
    child = spawn("signal-in-lock")
    child.proc.send_signal(signal.SIGTERM)
    out, err = child.proc.communicate(timeout=WAIT)
    assert (child.proc.returncode, out.strip()) == (0, "closed"), err
    assert process_gone(child.unit_pid)


@pytest.mark.parametrize("mode", ["exit", "raise", "drop"])
def test_a_program_that_ends_without_close_kills_its_units_at_exit(spawn: Any, mode: str) -> None:
    child = spawn(mode)
    _, err = child.proc.communicate(timeout=WAIT)
    assert child.proc.returncode == (1 if mode == "raise" else 0), err
    assert process_gone(child.unit_pid)


def test_an_exit_during_a_close_in_another_thread_lets_that_close_finish(
    spawn: Any, state_dir: Path
) -> None:
    # The close's thread is a daemon: the interpreter exiting would cut it short,
    # leaving its units running in the ledger, for the next supervisor to run again.
    child = spawn("close-in-thread")
    _, err = child.proc.communicate(timeout=WAIT)
    assert child.proc.returncode == 0, err
    assert process_gone(child.unit_pid)
    with connect(state_dir / "main") as client:
        (record,) = client.list()
    assert (record.status, record.reason) == (Status.KILLED, Reason.SHUTDOWN)


def test_signal_handlers_arrive_with_the_first_supervisor_that_wants_them(spawn: Any) -> None:
    # The program's first supervisor asked for no signal handlers; its second did.
    child = spawn("quiet-first")
    child.proc.send_signal(signal.SIGTERM)
    assert child.proc.wait(WAIT) == -signal.SIGTERM
    assert process_gone(child.unit_pid), "SIGTERM bypassed the second supervisor's cleanup"


def test_a_signal_the_program_ignores_does_not_end_its_work(spawn: Any) -> None:
    # Like `nohup`: SIGHUP is ignored before the supervisor starts.
    child = spawn("ignore-hup")
    child.proc.send_signal(signal.SIGHUP)
    out, err = child.proc.communicate("carry on\n", timeout=WAIT)
    assert (child.proc.returncode, out.strip()) == (0, "running"), err
    assert process_gone(child.unit_pid)  # the program's own close() ended it


def test_signals_ignored_by_the_programs_parent_stay_ignored(spawn: Any) -> None:
    # `nohup python app.py &`: the program never touches its dispositions, it
    # inherits them. A hangup or Ctrl-C meant for the terminal must not end its work.
    child = spawn("inherited-ignores", ignoring="HUP INT")
    child.proc.send_signal(signal.SIGHUP)
    child.proc.send_signal(signal.SIGINT)
    out, err = child.proc.communicate("carry on\n", timeout=WAIT)
    assert (child.proc.returncode, out.strip()) == (0, "running"), err
    assert process_gone(child.unit_pid)  # the program's own close() ended it
