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
import resource
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import workunits as wu
from workunits._sandbox.probe import Machine
from workunits._zygote import warm

from ..conftest import eventually
from . import unprivileged

cloudpickle.register_pickle_by_value(sys.modules[__name__])

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
        # The subject is a fork that fails: no warm process forked before the limit.
        env[warm.PROCESSES_ENV] = "0"
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


def gated(gate: str) -> str:
    pause = threading.Event()
    while not os.path.exists(gate):
        pause.wait(0.02)
    return "released"


def answer() -> int:
    return 42


@pytest.mark.timeout(60)
def test_a_zygote_out_of_descriptors_fails_new_units_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its descriptors are counted exactly: no spare may come or go meanwhile.
    monkeypatch.setenv(warm.PROCESSES_ENV, "0")
    gate = tmp_path / "gate"
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        running = sup.agent(gated, str(gate))
        eventually(lambda: sup.get(running.id).pid is not None, what="the first agent to start")
        zygote = sup._machinery.zygote.pid
        assert zygote is not None
        soft, hard = resource.prlimit(zygote, resource.RLIMIT_NOFILE)
        # Every descriptor number below the limit is taken: the next one it needs fails.
        taken = {int(fd) for fd in os.listdir(f"/proc/{zygote}/fd")}
        lowest_free = min(set(range(len(taken) + 1)) - taken)
        resource.prlimit(zygote, resource.RLIMIT_NOFILE, (lowest_free, hard))
        try:
            starved = [sup.agent(answer), sup.shell(["true"])]
            for unit in starved:
                record = sup.wait(unit.id, timeout=30)
                assert record.status is wu.Status.FAILED
                assert "EMFILE" in (record.error or ""), record.error
            assert sup.get(running.id).status is wu.Status.RUNNING
        finally:
            resource.prlimit(zygote, resource.RLIMIT_NOFILE, (soft, hard))
        gate.touch()
        assert sup.result(running.id, timeout=30) == "released"
        assert sup.result(sup.agent(answer).id, timeout=30) == 42
        assert sup._machinery.zygote.pid == zygote


@pytest.mark.timeout(60)
def test_a_process_that_cannot_set_itself_up_fails_its_unit_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked, but its set-up failed before the function ran: the cause, not only code 70."""
    # Forked on demand, its set-up (a capture thread among it) runs under the limit.
    monkeypatch.setenv(warm.PROCESSES_ENV, "0")
    machine = Machine.probe()
    if not (machine.cgroup_pids or (machine.uid != 0 and machine.user_namespaces)):
        pytest.skip("needs a pids cgroup, or user namespaces for a user other than root")
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        # One task for its tree: no thread of its set-up can start.
        unit = sup.agent(answer, sandbox=wu.Sandbox(processes=1))
        record = sup.wait(unit.id, timeout=30)
        assert (record.status, record.exit_code) == (wu.Status.FAILED, 70)
        error = record.error or ""
        assert error.startswith("StartFailed: its process could not run it: "), error
        assert "Traceback" in error
        assert record.reason is wu.Reason.PROCESSES_LIMIT  # the limit it ran into, named
        assert sup.result(sup.agent(answer).id, timeout=30) == 42  # the others start as usual
