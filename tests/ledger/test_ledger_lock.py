"""One supervisor per state dir: refusal naming the holder, waiting, release on SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from tests.ledger.support import read_line, send, spawn
from workunits._ledger import SupervisorBusy, SupervisorLock


def test_a_lock_is_taken_released_and_taken_again(state_dir: Path) -> None:
    lock = SupervisorLock(state_dir)
    with lock:
        assert lock.held
        assert lock.holder_pid() == os.getpid()
        with pytest.raises(RuntimeError, match="already held"):
            lock.acquire()
    assert not lock.held
    assert lock.holder_pid() is None
    with SupervisorLock(state_dir):
        pass


def test_a_second_lock_in_the_same_process_is_refused(state_dir: Path) -> None:
    # flock locks belong to open files, not processes: two supervisors in one
    # process are refused too.
    with SupervisorLock(state_dir), pytest.raises(SupervisorBusy) as caught:
        SupervisorLock(state_dir).acquire()
    assert caught.value.pid == os.getpid()


@pytest.mark.timeout(60)
def test_another_process_is_refused_naming_the_holder_until_it_is_killed(
    state_dir: Path,
) -> None:
    with spawn("hold-lock", str(state_dir)) as holder:
        pid = json.loads(read_line(holder))["pid"]
        with pytest.raises(SupervisorBusy) as caught:
            SupervisorLock(state_dir).acquire()
        assert caught.value.pid == pid
        assert f"pid {pid}" in str(caught.value)
        assert str(state_dir) in str(caught.value)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    # The kernel dropped the dead holder's lock: no stale lock file to clean.
    with SupervisorLock(state_dir) as lock:
        assert lock.holder_pid() == os.getpid()


@pytest.mark.timeout(60)
def test_a_waiting_supervisor_gets_the_lock_when_the_holder_lets_go(state_dir: Path) -> None:
    with spawn("hold-lock", str(state_dir)) as holder:
        read_line(holder)
        send(holder, "release")  # it may let go before or during our wait: both are fine
        lock = SupervisorLock(state_dir)
        lock.acquire(timeout=30)
        assert read_line(holder) == '"released"'
        lock.release()


@pytest.mark.timeout(60)
def test_a_wait_that_runs_out_says_how_long_it_waited(state_dir: Path) -> None:
    with spawn("hold-lock", str(state_dir)) as holder:
        pid = json.loads(read_line(holder))["pid"]
        with pytest.raises(SupervisorBusy, match=rf"pid {pid}.* after waiting 0.2 s"):
            SupervisorLock(state_dir).acquire(timeout=0.2, poll_interval=0.01)


@pytest.mark.timeout(60)
def test_a_forked_child_of_a_killed_holder_does_not_keep_the_lock(state_dir: Path) -> None:
    with spawn("hold-lock", str(state_dir), "fork") as holder:
        # Both the holder and its child answer, in either order.
        answers = {k: v for _ in range(2) for k, v in json.loads(read_line(holder)).items()}
        child = answers["child"]
        try:
            holder.send_signal(signal.SIGKILL)
            holder.wait(30)
            # The child still runs, and holds a copy of every inherited descriptor
            # except the lock's.
            os.kill(child, 0)
            with SupervisorLock(state_dir) as lock:
                assert lock.held
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
