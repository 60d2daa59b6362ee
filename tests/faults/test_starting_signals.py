"""A signal to a unit process that is still starting ends that unit only.

The zygote forks each unit process; until the child has set its signals'
default actions it still has the zygote's handlers, and the zygote's SIGTERM
handler is its shutdown, which kills every unit. A unit's pid is on record
as soon as it is forked, and a Python unit reads its payload before it sets
up, so anyone may signal it in that window (a large payload makes it long).
The zygote forks with those signals blocked; the child unblocks them once
their actions are the default ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

import workunits as wu
from workunits._zygote import warm

from ..conftest import alive, eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PAYLOAD = 128 << 20  # read by the unit process before it sets up: ~0.1 s here

# A child forked the zygote's way gets SIGTERM before it sets up, then sets up.
FORK_THEN_SIGNAL = """
import os, signal
from workunits._zygote import unit_process

signal.signal(signal.SIGTERM, lambda *_: os.write(1, b"the zygote's handler ran in the child\\n"))
parent = os.getpid()
r, w = os.pipe()
pid = unit_process.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)  # until the parent has sent the signal
    unit_process.detach(parent, subreaper=False)
    os.write(1, b"the child lived on\\n")
    os._exit(0)
os.close(r)
os.kill(pid, signal.SIGTERM)
os.write(w, b"go")
_, status = os.waitpid(pid, 0)
print("ended by", os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit")
"""


@pytest.mark.timeout(60)
def test_a_signal_before_set_up_waits_and_then_acts_as_on_any_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_THEN_SIGNAL],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ended by {int(signal.SIGTERM)}\n"


def wait_with(data: bytes) -> int:
    threading.Event().wait()  # until it is killed
    return len(data)


@pytest.mark.timeout(120)
def test_a_sigterm_to_a_starting_unit_ends_it_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm.PROCESSES_ENV, "0")  # forked on demand: set up after the fork
    with wu.Supervisor(tmp_path / "state", install_signal_handlers=False) as sup:
        others = [sup.agent(wait_with, b"") for _ in range(3)]
        pids = [eventually(lambda o=o: sup.get(o.id).pid, what="a unit to start") for o in others]  # type: ignore[misc]
        starting = sup.agent(wait_with, b"x" * PAYLOAD)
        pause = threading.Event()
        deadline = time.monotonic() + 60
        while (pid := sup.get(starting.id).pid) is None:  # as soon as it is on record
            assert time.monotonic() < deadline, "the unit never started"
            pause.wait(0.0005)
        os.kill(pid, signal.SIGTERM)
        record = sup.wait(starting.id, timeout=30)
        assert (record.status, record.signal) == (wu.Status.FAILED, signal.SIGTERM)
        for other, other_pid in zip(others, pids, strict=True):
            assert sup.get(other.id).status is wu.Status.RUNNING
            assert alive(other_pid)
