"""RLIMIT_NOFILE: raised for the supervisor, given back to the units.

The supervisor holds descriptors for every running unit (a pidfd, its output
file, an agent's channel), so 5,000 units need far more than the soft limit a
login or service usually starts with (1,024). ``raise_for_supervisor`` raises
the soft limit toward the hard one at start and remembers the soft limit it
found. A unit should not inherit the raised limit: programs that use
``select()`` (or a C ``fd_set``) break or overflow once they hold a descriptor
numbered 1,024 or more, which is why systemd and others keep the soft limit
low and let a program that needs more raise it itself. So the supervisor
passes the soft limit it found to the zygote (``environment``); the zygote,
which uses epoll and may keep the raised limit, takes it out of its own
environment (``take_from_environment``) and every process it forks sets it
back (``restore_in_child``) before any unit code runs, or around a
``posix_spawn`` (``lowered_for_spawn``).

Supervisor side: ``raise_for_supervisor`` and ``environment``. Zygote side:
``take_from_environment`` (once, before forking), ``restore_in_child`` and
``lowered_for_spawn``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections.abc import Iterator

ENV = "WORKUNITS_UNIT_NOFILE"
_NR_OPEN = "/proc/sys/fs/nr_open"


class _Found:
    """What this process learnt; one per process (the module's ``_found``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards ``before``: two supervisors may start at once
        # The soft limit this process had before the first raise (None: not raised yet).
        self.before: int | None = None
        # In the zygote: the soft limit its children get back (None: leave theirs as is).
        self.for_units: int | None = None


_found = _Found()


def _ceiling(hard: int) -> int:
    """The highest soft limit allowed: the hard limit, or the kernel's nr_open when unlimited."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open(_NR_OPEN, encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20  # the kernel's default nr_open


def raise_for_supervisor() -> tuple[int, int] | None:
    """Raise this process's soft RLIMIT_NOFILE to its ceiling; ``(before, after)`` if raised.

    Idempotent: a later call (a second supervisor) finds nothing to raise and
    returns None, while ``environment`` still reports the first soft limit.
    """
    with _found.lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if _found.before is None:
            _found.before = soft
        target = _ceiling(hard)
        if soft == resource.RLIM_INFINITY or soft >= target:
            return None
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return None  # a hard limit we may not reach; carry on with what we have
        return soft, target


def environment() -> dict[str, str]:
    """The variable that tells a zygote which soft limit its units get (empty: unchanged)."""
    with _found.lock:
        before = _found.before
    return {} if before is None else {ENV: str(before)}


def take_from_environment() -> None:
    """In the zygote, before it forks: read and remove ``ENV`` (units must not see it)."""
    text = os.environ.pop(ENV, "")
    _found.for_units = int(text) if text.isdigit() else None


def restore_in_child() -> None:
    """In a process the zygote forked: the soft limit the supervisor started with."""
    for_units = _found.for_units
    if for_units is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = for_units if hard == resource.RLIM_INFINITY else min(for_units, hard)
    if wanted != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@contextlib.contextmanager
def lowered_for_spawn() -> Iterator[None]:
    """Around a ``posix_spawn`` (no code of ours runs in the child): the child inherits
    the units' soft limit. The zygote is single-threaded, so lowering its own
    limit for the call is safe; descriptors it already holds stay valid."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _found.for_units is None or soft == _found.for_units:
        yield
        return
    restore_in_child()
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
