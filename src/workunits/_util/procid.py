"""Who holds a claim or a lease: a process named so that a reused PID is not mistaken for it.

An owner is ``<host>/<boot id>/<pid>/<start time>``: the start time (in clock
ticks since boot, from ``/proc/<pid>/stat``) tells a reused PID apart, and the
boot ID tells this boot from an earlier one. Another process on the same
machine can then check whether the owner still runs, with no message to it;
an owner on another host can only be ended by its lease.

Where ``/proc`` is missing (macOS) the start time is 0 and liveness degrades
to "a process with that PID exists".
"""

from __future__ import annotations

import functools
import os
import socket

_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_ENDED = (b"Z", b"X")  # zombie, dead: the states of a process that has exited


@functools.cache
def _boot_id() -> str:
    try:
        with open(_BOOT_ID_FILE, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "noboot"


def _start_time(pid: int) -> int | None:
    """The process's start time in ticks since boot; None if it does not exist."""
    found = _state_and_start(pid)
    return None if found is None else found[1]


def _state_and_start(pid: int) -> tuple[bytes, int] | None:
    """The process's state letter and start time; None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        start = _start_time_without_proc(pid)
        return None if start is None else (b"?", start)
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0], int(fields[19])  # fields 3 and 22 of the whole line


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (it may be another one, if the pid was reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, and belongs to someone else
    return True


def _start_time_without_proc(pid: int) -> int | None:
    return 0 if pid_exists(pid) else None


@functools.cache
def _this_process(pid: int) -> str:
    # Cached per PID: a forked child computes its own.
    return f"{socket.gethostname()}/{_boot_id()}/{pid}/{_start_time(pid) or 0}"


def this_process() -> str:
    """The owner string of the calling process."""
    return _this_process(os.getpid())


def is_alive(owner: str) -> bool | None:
    """Whether the owning process still runs: True, False, or None when it cannot be told.

    None for an owner that is not a process of this machine (a lease-only
    consumer, or another host): only its lease can end it. An owner of this
    host from an earlier boot is dead.
    """
    parts = owner.split("/")
    if len(parts) != 4 or parts[0] != socket.gethostname():
        return None
    if parts[1] != _boot_id():
        return False
    try:
        pid, start = int(parts[2]), int(parts[3])
    except ValueError:
        return None
    found = _state_and_start(pid)
    if found is None:
        return False
    state, now_start = found
    if state in _ENDED:  # exited, and not yet reaped by its parent: it holds nothing
        return False
    return start in (0, now_start)  # 0: recorded where start times are unknown
