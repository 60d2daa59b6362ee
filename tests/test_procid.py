"""Claim and lease holders are processes: one that has exited holds nothing (``_procid``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workunits import _procid


def _owner_of(pid: int) -> str:
    host, boot, _, _ = _procid.this_process().split("/")
    return f"{host}/{boot}/{pid}/{_procid._start_time(pid)}"


@pytest.mark.timeout(30)
def test_a_holder_is_alive_while_it_runs_and_dead_once_it_exits_even_unreaped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        owner = _owner_of(proc.pid)
        assert _procid.is_alive(owner) is True
        assert proc.stdin is not None
        proc.stdin.close()  # it exits
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not reaped
        assert _procid.is_alive(owner) is False
    finally:
        proc.kill()
        proc.wait()
    assert _procid.is_alive(owner) is False


def test_a_reused_pid_is_not_the_holder() -> None:
    host, boot, pid, start = _procid.this_process().split("/")
    assert _procid.is_alive(f"{host}/{boot}/{pid}/{start}") is True
    assert _procid.is_alive(f"{host}/{boot}/{pid}/{int(start) + 1}") is False
