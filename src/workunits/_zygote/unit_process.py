"""What makes a process the zygote forked into a unit process (forked for its unit, or warm).

``detach`` is the part that needs no unit, so a warm process does it before
demand: its own session and process group, SIGKILL as its parent-death
signal, a child subreaper (subreaper mode), default signal handlers, which
``fork`` holds the signals for until then.
``apply_limits`` is the unit's part: its resource limits and priority, set on
the calling process (``setrlimit``) and every one of its threads (priority),
so they hold whether the process was forked for the unit or long before.
"""

from __future__ import annotations

import os
import resource
import signal

from workunits._wire.zygote_protocol import Limits
from workunits._zygote import _linux, nofile

EXIT_RUNTIME_BROKEN = 70
RESET_SIGNALS = (
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGUSR1,
)


def fork() -> int:
    """``os.fork`` for the zygote: ``RESET_SIGNALS`` stay blocked in the child until
    ``detach`` has given them their default actions.

    Until then the child still has the zygote's handlers: a SIGTERM sent to a
    unit just forked (its pid is on record at once; a large payload is read
    before ``detach``) ran the zygote's shutdown in the child, which killed
    every other unit. Blocked, it waits and then acts as it would on any process.
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, RESET_SIGNALS)
    pid = -1
    try:
        pid = os.fork()
    finally:
        if pid != 0:  # the zygote, forked or not: its own mask back
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pid


def detach(zygote: int, *, subreaper: bool) -> None:
    """In a child of the zygote ``zygote``: own session, parent-death signal, clean signals.

    A subreaper unit process keeps its orphans while it lives (subreaper mode).
    The zygote's descriptors are the caller's to close.
    """
    os.setsid()
    _linux.set_parent_death_signal(signal.SIGKILL)
    if subreaper:
        _linux.set_child_subreaper()
    if os.getppid() != zygote:
        os._exit(EXIT_RUNTIME_BROKEN)  # the zygote died between fork and prctl
    signal.set_wakeup_fd(-1)
    for signum in RESET_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RESET_SIGNALS)  # held since ``fork``
    nofile.restore_in_child()  # not the supervisor's raised descriptor limit (see nofile)


def apply_limits(limits: Limits) -> None:
    """The unit's limits, on this process (before any of the unit's code runs)."""
    if limits.output_cap is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_cap, limits.output_cap))
    if limits.memory is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
    if limits.idle_priority:
        _linux.set_idle_priority()
