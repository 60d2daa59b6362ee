"""Linux process controls via prctl, degrading to no-ops elsewhere (macOS)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Collection

from workunits._unit.descendants import kill_children

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _prctl(option: int, arg: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return int(_libc.prctl(option, arg, 0, 0, 0)) == 0


def kill_through_pidfd(pidfd: int) -> None:
    """SIGKILL the process ``pidfd`` names; nothing if it has exited. A pidfd names one
    process for as long as it is open (the caller keeps it so), never a stranger."""
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` when the thread that forked us exits."""
    return _prctl(PR_SET_PDEATHSIG, signum)


def set_child_subreaper() -> bool:
    """Make orphaned descendants re-parent to us instead of to init."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_name(name: bytes) -> None:
    """Name this process as ``ps`` shows it (at most 15 bytes); a no-op where it cannot."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "wb") as f:
        f.write(name[:15])


def process_name() -> bytes:
    """This process's name (``comm``), to give it back after ``set_name``."""
    try:
        with open("/proc/self/comm", "rb") as f:
            return f.read().rstrip(b"\n")
    except OSError:
        return b""


def set_idle_priority() -> None:
    """SCHED_IDLE for every thread of this process where the kernel has it, else nice 19.

    Both are per thread on Linux; a warm process has started threads before it
    learns that its unit is a dream.
    """
    for tid in _threads():
        _set_idle_priority(tid)


def _threads() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]  # the calling thread


def _set_idle_priority(tid: int) -> None:
    sched_idle = getattr(os, "SCHED_IDLE", None)
    if sched_idle is not None:
        try:
            os.sched_setscheduler(tid, sched_idle, os.sched_param(0))
        except OSError:
            pass
        else:
            return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, 19)


def kill_tree_round(of: int, spare: Collection[int] = ()) -> int:
    """SIGKILL every child of ``of`` but ``spare``, with its group; how many were hit
    (``descendants.kill_children``: a subreaper calls it until it hits none)."""
    return len(kill_children(of, spare))
