"""Shared fixtures: a supervisor per test on a private state dir, torn down for sure."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

import workunits as wu

T = TypeVar("T")


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[wu.Supervisor]:
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as supervisor:
        yield supervisor


def eventually(check: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Re-check ``check`` until it returns something truthy; fail after ``timeout``.

    A bounded, timed wait on a condition, not a sleep followed by an assertion.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    delay = 0.001
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or check}")
        pause.wait(delay)
        delay = min(delay * 2, 0.05)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def running_pid(sup: wu.Supervisor, work_id: str) -> int:
    """The unit's pid, once its process exists."""
    return eventually(lambda: sup.get(work_id).pid, what=f"{work_id} to start")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
