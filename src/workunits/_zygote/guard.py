"""The zygote's guard: the process above it that cleans up if it dies unclean.

The supervisor starts one process; it becomes a child subreaper and forks the
zygote, then waits. A zygote that is SIGKILLed cannot kill its units' escaped
descendants; its units die of their parent-death signal, and everything they
left comes back here (the closest living subreaper). When the zygote has gone,
however it went, the guard kills every process that came back to it, round by
round, and the zygote's cgroups if it had them, then exits. Single-threaded,
holds no descriptor of the zygote's, and imports nothing the zygote preloads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import NoReturn

from workunits._sandbox.limits import UnitCgroups
from workunits._zygote import _linux
from workunits._zygote.containment import Cgroups

SWEEP_SECONDS = 5.0


def run(zygote: int, cgroups: Cgroups | None, limit_cgroups: UnitCgroups | None = None) -> NoReturn:
    """Reap everything until the zygote has exited, then sweep; exits like the zygote.

    ``limit_cgroups``: the zygote's directories for units' limits, removed last.
    """
    code = 0
    try:
        # The supervisor decides: its Ctrl-C or SIGTERM reaches the zygote through its socket.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = _wait_for(zygote)
    finally:
        sweep(cgroups)
        if limit_cgroups is not None:
            limit_cgroups.remove_all()
        os._exit(code)


def _wait_for(zygote: int) -> int:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == zygote:
            return 0 if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)


def sweep(cgroups: Cgroups | None) -> None:
    """Kill and reap every process that came back to us, and empty the cgroups."""
    if cgroups is not None:
        cgroups.kill(cgroups.root)
    me = os.getpid()
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        hit = _linux.kill_tree_round(me)
        reaped = _reap_all()
        if not hit and not reaped and (cgroups is None or cgroups.remove_all()):
            return
        if not hit and not reaped:
            time.sleep(0.001)  # cgroup members still dying: not ours to wait for


def _reap_all() -> int:
    reaped = 0
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid <= 0:
                break
            reaped += 1
    return reaped
