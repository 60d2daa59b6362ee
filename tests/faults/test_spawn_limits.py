"""A fault in starting one unit fails that unit only (invariant 14).

The zygote forks every unit. When it cannot (EAGAIN under RLIMIT_NPROC, ENOMEM,
EMFILE), the unit it was asked for ends ``failed`` naming the cause, and the
zygote and every unit already running carry on. Root ignores RLIMIT_NPROC, so
the supervisor runs unprivileged (``tests.faults.unprivileged``) and the test
lowers only its zygote's limit, with prlimit(2), so nothing else is starved.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import unprivileged

ROOT = Path(__file__).resolve().parents[2]


class Host:
    def __init__(self, proc: subprocess.Popen[str], prefix: list[str]) -> None:
        self.proc = proc
        self.prefix = prefix

    def prlimit(self, pid: int, nproc: str) -> None:
        """Set a process's RLIMIT_NPROC as its own user (root here lacks CAP_SYS_RESOURCE)."""
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            pytest.skip("no prlimit (util-linux) to lower the zygote's process limit")
        subprocess.run([*self.prefix, prlimit, f"--pid={pid}", f"--nproc={nproc}"], check=True)

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the host ended early: {self.stderr()}"
        return json.loads(line)

    def say(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-4000:]


def nproc_soft_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max processes"):
                return line.split()[2]
    raise AssertionError(f"no process limit in /proc/{pid}/limits")


@pytest.fixture
def host() -> Iterator[Host]:
    prefix = unprivileged.command_prefix()
    with unprivileged.owned_dir() as base:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "tests.faults.spawn_limit_host",
                str(base / "state"),
                str(base / "gate"),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            yield Host(proc, prefix)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)


@pytest.mark.timeout(90)
def test_a_fork_that_fails_fails_its_unit_only(host: Host) -> None:
    hello = host.read()
    assert hello["uid"] != 0
    zygote = int(hello["zygote"])
    soft = nproc_soft_limit(zygote)
    # The user already has more processes than one: every fork of the zygote fails.
    host.prlimit(zygote, "1:")
    host.say("limited")
    starved = host.read()
    for status, error in starved["starved"]:
        assert status == "failed"
        assert "EAGAIN" in error, error
    assert starved["running"] == ["running"] * 3
    host.prlimit(zygote, f"{soft}:")
    host.say("unlimited")
    report = host.read()
    assert report["released"] == [["completed", None]] * 3
    assert report["after"] == 42
