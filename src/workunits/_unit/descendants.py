"""What /proc says about a process's children and its cgroup, and ending them.

One place for the zygote (its orphans, its guard's sweep), a pooled worker and
a Ray worker, which run unit after unit: what one unit started must end with
it (DESIGN §2.9), not run on beside the next. Linux's list of a process's
children (``/proc/PID/task/TID/children``) names them; ``/proc/PID/cgroup``
and the cgroup v2 mount say where a process is contained.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Collection


def children(of: int) -> list[int]:
    """Processes whose parent is ``of``: the kernel's list, else a scan of /proc.

    The list (``/proc/PID/task/TID/children``) is cheap; it needs
    CONFIG_PROC_CHILDREN, and is per thread, so every thread's list is read.
    """
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{of}/task")
        for tid in tasks:
            with open(f"/proc/{of}/task/{tid}/children", "rb") as f:
                pids.extend(int(p) for p in f.read().split())
    except FileNotFoundError:
        return child_pids(of) if os.path.exists(f"/proc/{of}") else []
    except OSError:
        return child_pids(of)
    return pids


def has_children() -> bool:
    """Whether this process has a child, alive or not yet reaped: one ``waitid`` that
    neither waits nor reaps (a subreaper's adopted orphans count), where reading
    ``children`` means a file per thread."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def child_pids(of: int) -> list[int]:
    """Processes whose parent is ``of`` (scans /proc; empty where there is none)."""
    pids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces or ')': fields resume after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == of:
            pids.append(int(entry))
    return pids


def kill_children(of: int, spare: Collection[int] = ()) -> list[int]:
    """SIGKILL every child of ``of`` but ``spare``, with its group; the pids hit.

    A subreaper calls this until it hits none, reaping in between: a child's own
    orphans come back to the subreaper when it dies, and are hit next round.
    """
    ours = os.getpgrp()
    hit = [pid for pid in children(of) if pid not in spare]
    for pid in hit:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # A child forked a moment ago (a zygote's, before its setsid) is still in
            # our group: killing that group would kill the caller. Any other group
            # holds only processes of the same session: descendants of ours.
            group = os.getpgid(pid)
            if group != ours:
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return hit


def end_children(spare: Collection[int] = ()) -> list[int]:
    """``kill_children`` of this process, then reap them; the pids ended. Their orphans
    are not ours to reap unless this process is a subreaper (then they come back)."""
    ended = kill_children(os.getpid(), spare)
    for pid in ended:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return ended


def cgroup_of(pid: int | str = "self") -> str | None:
    """The cgroup v2 directory (mount point + path) process ``pid`` is in; None when
    it is gone or there is no v2 hierarchy."""
    mount = cgroup2_mount()
    if mount is None:
        return None
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return os.path.join(mount, line[3:].strip().lstrip("/")).rstrip("/") or mount
    except OSError:
        return None
    return None


@functools.cache
def cgroup2_mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted, or None without one (read once)."""
    found = cgroup2_mountinfo()
    return None if found is None else found[0]


def cgroup2_mountinfo() -> tuple[str, list[str]] | None:
    """The cgroup v2 hierarchy's mount point and super options, or None without one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                before, _, after = line.partition(" - ")
                fields = after.split()
                if fields and fields[0] == "cgroup2":
                    return before.split()[4], fields[-1].split(",")
    except OSError:
        return None
    return None


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (``PR_GET_CHILD_SUBREAPER``); False
    where that cannot be asked (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    from workunits._sandbox import _libc  # noqa: PLC0415 - Linux's libc, loaded only there

    try:
        return _libc.child_subreaper()
    except OSError:
        return False
