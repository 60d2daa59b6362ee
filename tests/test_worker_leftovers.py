"""A pooled worker ends what each unit left, even when it started beside the zygote.

The zygote forks a worker from inside the worker's new cgroup and steps out
after the fork; on a busy machine the worker starts while the zygote is still
in there. It used to read that as "this cgroup is shared" and stop looking at
it, so an orphan a unit left in it ran on until the supervisor closed (seen as
a rare failure of ``test_a_pooled_units_processes_end_with_it_not_with_the_worker``
under a CPU hog). Here the zygote's step out is held back on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from workunits._zygote import containment

from .conftest import alive

# Run in a fresh interpreter: it forks, and moves itself between cgroups.
SCRIPT = r"""
import os, shutil, sys
from workunits._unit.descendants import cgroup_of
from workunits._unit.worker import _Leftovers

own = cgroup_of()
path = os.path.join(own, f"workunits-leftovers-test-{os.getpid()}")
os.mkdir(path)
with open(os.path.join(path, "cgroup.procs"), "w") as f:
    f.write("0")  # as the zygote does for the fork
started_r, started_w = os.pipe()
stepped_r, stepped_w = os.pipe()
report_r, report_w = os.pipe()
worker = os.fork()
if worker == 0:
    leftovers = _Leftovers()  # the zygote is still in this cgroup
    os.write(started_w, b"1")
    os.read(stepped_r, 1)
    # A unit's orphan: a double fork in a new session, reparented away from us.
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            sleep = shutil.which("sleep") or "/bin/sleep"
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # a survivor must not hold the test's pipes open
                os.dup2(null, fd)
            os.execv(sleep, [sleep, "301"])
        os._exit(0)
    os.waitpid(middle, 0)
    orphan = [p for p in map(int, open(os.path.join(path, "cgroup.procs")).read().split())
              if p != os.getpid()]
    leftovers.end_all()
    os.write(report_w, ",".join(map(str, orphan)).encode())
    os._exit(0)
os.read(started_r, 1)
with open(os.path.join(own, "cgroup.procs"), "w") as f:
    f.write("0")  # the zygote steps out, late
os.write(stepped_w, b"1")
os.waitpid(worker, 0)
os.close(report_w)
print(os.read(report_r, 64).decode(), flush=True)
try:
    os.rmdir(path)
except OSError:
    pass  # a survivor still in it: the test kills it and reports
"""


@pytest.mark.timeout(60)
def test_a_workers_orphan_ends_with_its_unit_though_the_zygote_left_late() -> None:
    found = containment.probe()
    if found.own is None:
        pytest.skip(f"no cgroup per unit here: {found.reason}")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    orphans = [int(p) for p in out.split(",") if p.strip()]
    assert orphans, f"the orphan was not in the worker's cgroup: {out!r}"
    survivors = [pid for pid in orphans if alive(pid)]
    for pid in survivors:  # do not leave it running past a failed test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"left running after end_all: {survivors}"
