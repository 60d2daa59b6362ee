"""OS processes owned by units: pidfds, group signals, exit statuses.

Signals go through pidfds where the kernel allows it, so a reused PID is never
hit. A unit leads its own session and process group (``setsid``), so its group
ID equals its PID; the group ID stays reserved while the leader is unreaped or
any member lives, which makes ``killpg`` safe at the moments we use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a process ended: exactly one of ``exit_code`` and ``signal`` is set."""

    exit_code: int | None
    signal: int | None

    @classmethod
    def from_waitid(cls, result: os.waitid_result) -> ExitStatus:
        if result.si_code == os.CLD_EXITED:
            return cls(exit_code=result.si_status, signal=None)
        return cls(exit_code=None, signal=result.si_status)

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        if os.WIFSIGNALED(status):
            return cls(exit_code=None, signal=os.WTERMSIG(status))
        return cls(exit_code=os.waitstatus_to_exitcode(status), signal=None)


class ChildProcess:
    """A child of this process that leads its own group, watched through a pidfd.

    Owned by one WorkActor; all methods run in that actor's thread except
    ``pidfd``, which the Reaper only polls.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        # The child is unreaped, so this PID cannot have been reused yet.
        self.pidfd = os.pidfd_open(pid)
        self.status: ExitStatus | None = None

    def signal_group(self, signum: int) -> None:
        """Signal the whole process group, then the leader through its pidfd."""
        if self.status is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signum)

    def reap(self) -> ExitStatus | None:
        """Collect the exit status if the leader has exited; None while it runs.

        Before reaping, stragglers left in the group (background jobs of a shell)
        are killed: a unit ends with its leader, and the zombie leader still pins
        the group ID, so the kill cannot hit a stranger.
        """
        if self.status is not None:
            return self.status
        result = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if result is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        reaped = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG)
        assert reaped is not None, "the leader was seen exited and only we reap it"
        self.status = ExitStatus.from_waitid(reaped)
        return self.status

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
