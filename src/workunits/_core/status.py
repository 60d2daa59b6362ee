"""The lifecycle: one enum, one terminal test, one transition table.

``pending -> running -> completed | failed | killed``. ``pending -> killed`` is a
cancel that arrived before start (the body never runs). No other transitions
happen. Terminal is permanent: the registry ignores an update that would leave a
terminal status, because races such as "the process exited after the kill" are
normal, not errors.
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """A unit's status: ``pending -> running -> completed | failed | killed``, forward only."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"


class Reason(enum.StrEnum):
    """Why a unit ended early (``killed``), or why it was ``failed`` by us (``lost``...)."""

    KILLED = "killed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    OUTPUT_CAP = "output-cap"
    SHUTDOWN = "shutdown"
    PARENT_ENDED = "parent-ended"
    LOST = "lost"
    SHED = "shed"  # load shedding (``Supervisor.shed``): worth resubmitting when load falls
    # A teammate ended unasked more often than its restart policy allows (``_core.restart``).
    RESTART_INTENSITY = "restart-intensity"
    # Not an end: an attempt stopped at a deploy for the next supervisor to resume
    # (``close(deploy=True)``). It raises the attempt, and counts as no failure.
    HANDED_OVER = "handed-over"
    # A resource limit of its sandbox (``wu.Sandbox``) ended it: the kernel killed it
    # (memory, CPU, a file too large), or it failed for want of processes or files.
    MEMORY_LIMIT = "memory-limit"
    CPU_LIMIT = "cpu-limit"
    PROCESSES_LIMIT = "processes-limit"
    FILE_SIZE_LIMIT = "file-size-limit"
    OPEN_FILES_LIMIT = "open-files-limit"


_TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.KILLED})

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.RUNNING, Status.KILLED}),
    Status.RUNNING: frozenset({Status.COMPLETED, Status.FAILED, Status.KILLED}),
    Status.COMPLETED: frozenset(),
    Status.FAILED: frozenset(),
    Status.KILLED: frozenset(),
}


def is_terminal(status: Status) -> bool:
    """The only place that knows which statuses are terminal."""
    return status in _TERMINAL


def allowed(old: Status, new: Status) -> bool:
    """True when ``old -> new`` is in the transition table (staying put is always allowed)."""
    return old == new or new in TRANSITIONS[old]
