"""Nothing outlives the supervisor (invariant 10), however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import alive, eventually

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Callable[[str], tuple[subprocess.Popen[str], Info]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(mode: str) -> tuple[subprocess.Popen[str], Info]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.supervisor_script", str(tmp_path / "state"), mode],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the supervisor script died before starting its units"
        raw = json.loads(line)
        return proc, Info(int(raw["supervisor"]), int(raw["zygote"]), [int(p) for p in raw["pids"]])

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass(frozen=True)
class Info:
    supervisor: int
    zygote: int
    pids: list[int]


def assert_all_gone(pids: list[int]) -> None:
    for pid in pids:
        eventually(lambda p=pid: not alive(p), timeout=15, what=f"pid {pid} to die")  # type: ignore[misc]


Start = Callable[[str], tuple[subprocess.Popen[str], Info]]


@pytest.mark.timeout(60)
def test_supervisor_sigkill_leaves_no_process(script: Start) -> None:
    proc, info = script("wait")
    assert all(alive(p) for p in info.pids)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert_all_gone([*info.pids, info.zygote])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_terminating_signals_kill_all_work(script: Start, signum: int) -> None:
    proc, info = script("wait")
    os.kill(proc.pid, signum)
    assert proc.wait(timeout=20) != 0  # the handlers chain: the process still dies of it
    assert_all_gone([*info.pids, info.zygote])


@pytest.mark.timeout(60)
def test_normal_exit_without_close_kills_all_work(script: Start) -> None:
    proc, info = script("exit")
    assert proc.wait(timeout=20) == 0
    assert_all_gone([*info.pids, info.zygote])
