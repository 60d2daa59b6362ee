"""Waiting on processes and output without sleeping: pidfds, terminal events, deadlines."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workunits import Notification, Supervisor, is_terminal

WAIT = 10.0  # real seconds anything in these tests may take; far above what it does take


def process_gone(pid: int, timeout: float = WAIT) -> bool:
    """True once ``pid`` has exited (a zombie counts as gone), False after ``timeout``.

    Waits on a pidfd, which becomes readable when the process exits.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)


def kill_if_alive(pid: int) -> None:
    """Clean-up for tests whose subject failed to kill a process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def read_until(sup: Supervisor, work_id: str, needle: bytes, timeout: float = WAIT) -> bytes:
    """Read the unit's output until it contains ``needle``; returns everything read.

    Between reads it waits on the unit's terminal event with a short bound, so a
    unit that ends wakes it at once and a unit that writes is re-read soon.
    """
    deadline = time.monotonic() + timeout
    seen = b""
    while True:
        ended = is_terminal(sup.get(work_id).status)
        seen += sup.read_output(work_id)  # after an end, this read is the final drain
        if needle in seen:
            return seen
        if ended:
            raise AssertionError(f"{work_id} ended without writing {needle!r}: {seen!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{work_id} did not write {needle!r} within {timeout} s: {seen!r}")
        with contextlib.suppress(TimeoutError):
            sup.wait(work_id, timeout=0.01)


def first_int(data: bytes) -> int:
    """The first line of ``data`` as an int (a pid a command echoed)."""
    return int(data.split(b"\n", 1)[0])


def children_of_this_process() -> set[int]:
    """PIDs of the direct children of every thread of this process (from /proc)."""
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        # A thread may end between the listing, the open and the read (ESRCH).
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/self/task/{tid}/children") as f,
        ):
            pids.update(int(p) for p in f.read().split())
    return pids


def as_notice(item: object) -> Notification:
    """A mailbox item that must be a terminal notice (mailboxes may carry other items)."""
    assert isinstance(item, Notification), f"expected a Notification, got {item!r}"
    return item


ROOT = Path(__file__).resolve().parent.parent


class Host:
    """A supervisor process of ``tests.<module>`` with ``args``; the test may SIGKILL it."""

    def __init__(self, module: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"tests.{module}", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        """The next JSON line the process printed."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the supervisor process ended without answering"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
