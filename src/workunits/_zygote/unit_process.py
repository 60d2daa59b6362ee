"""What makes a process the zygote forked into a unit process (forked for its unit, or warm).

``detach`` is the part that needs no unit, so a warm process does it before
demand: its own session and process group, SIGKILL as its parent-death
signal, a child subreaper (subreaper mode), default signal handlers.
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
    nofile.restore_in_child()  # not the supervisor's raised descriptor limit (see nofile)


def apply_limits(limits: Limits) -> None:
    """The unit's limits, on this process (before any of the unit's code runs)."""
    if limits.output_cap is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_cap, limits.output_cap))
    if limits.memory is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
    if limits.idle_priority:
        _linux.set_idle_priority()
