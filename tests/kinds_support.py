"""Helpers for the teammate, monitor and dream tests: supervisors, FIFOs, /proc.

Unit processes are forked by the zygote, which cannot import test modules, so
every test module (and this one) registers itself with cloudpickle *by value*:
its functions and classes travel whole into the units.

Synchronisation between a test and a unit process uses FIFOs, never sleeps:
``Fifo.wait`` blocks (with a timeout) until a unit writes a line, and a unit
blocks in ``read_line`` until the test calls ``Fifo.send``.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cloudpickle

import workunits as wu

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@contextlib.contextmanager
def supervisor(tmp_path: Path) -> Iterator[wu.Supervisor]:
    sup = wu.Supervisor(tmp_path / "state", install_signal_handlers=False)
    try:
        yield sup
    finally:
        sup.close()


class Fifo:
    """A named pipe the test holds open read-write, so neither side's open() blocks."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path, 0o600)
        self.path = str(path)
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._buffer = b""

    def send(self, line: str = "go") -> None:
        """Test -> unit: release a unit blocked in ``read_line(path)``."""
        os.write(self._fd, line.encode() + b"\n")

    def wait(self, timeout: float = 10.0) -> str:
        """Unit -> test: the next line a unit wrote with ``write_line(path)``."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._fd], [], [], remaining)[0]:
                raise TimeoutError(f"no line on {self.path} within {timeout} s")
            with contextlib.suppress(BlockingIOError):
                self._buffer += os.read(self._fd, 4096)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        os.close(self._fd)


def write_line(path: str, line: str) -> None:
    """In a unit: tell the test something (see ``Fifo.wait``)."""
    with open(path, "w") as f:
        f.write(line + "\n")


def read_line(path: str) -> str:
    """In a unit: block until the test calls ``Fifo.send``."""
    with open(path) as f:
        return f.readline().strip()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children of children too), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def wait_until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Poll a condition about the outside world (a process dying) until it holds."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true within {timeout} s: {what or condition}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def take_until_end(
    mailbox: wu.Mailbox, work_id: str, timeout: float = 10.0
) -> list[wu.MailboxItem]:
    """Everything the mailbox gets up to and including ``work_id``'s notification."""
    items: list[wu.MailboxItem] = []
    while True:
        item = mailbox.get(timeout=timeout)
        items.append(item)
        if isinstance(item, wu.Notification) and item.id == work_id:
            return items
