"""Claim and lease holders are processes: one that has exited holds nothing (``_util.procid``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workunits._util import procid


def _owner_of(pid: int) -> str:
    host, boot, _, _ = procid.this_process().split("/")
    return f"{host}/{boot}/{pid}/{procid._start_time(pid)}"


@pytest.mark.timeout(30)
def test_a_holder_is_alive_while_it_runs_and_dead_once_it_exits_even_unreaped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        owner = _owner_of(proc.pid)
        assert procid.is_alive(owner) is True
        assert proc.stdin is not None
        proc.stdin.close()  # it exits
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not reaped
        assert procid.is_alive(owner) is False
    finally:
        proc.kill()
        proc.wait()
    assert procid.is_alive(owner) is False


def test_a_reused_pid_is_not_the_holder() -> None:
    host, boot, pid, start = procid.this_process().split("/")
    assert procid.is_alive(f"{host}/{boot}/{pid}/{start}") is True
    assert procid.is_alive(f"{host}/{boot}/{pid}/{int(start) + 1}") is False
