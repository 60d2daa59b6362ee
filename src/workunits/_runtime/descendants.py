"""The processes a unit's code started in a process that outlives the unit.

A pooled worker and a Ray worker run unit after unit; what one unit started
must end with it (DESIGN §2.9), not run on beside the next. Linux's list of a
process's children (``/proc/PID/task/TID/children``) names them.
"""

from __future__ import annotations

import contextlib
import os
import signal


def children(pid: int) -> list[int]:
    """The kernel's list of ``pid``'s children (every thread's); empty where it has none."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
            found.extend(int(p) for p in f.read().split())
    return found


def end_children(spare: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every child of this process but ``spare`` (with its process group, when
    that is not ours), and reap it; the pids ended. Their orphans are not ours to
    reap unless this process is a subreaper (then they come back as children)."""
    ours = os.getpgrp()
    ended = [pid for pid in children(os.getpid()) if pid not in spare]
    for pid in ended:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != ours:  # a session or group of its own: what it started goes too
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in ended:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return ended
