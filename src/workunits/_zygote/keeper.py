"""A shell unit's keeper: the subreaper above a command that is not ours (subreaper mode).

The zygote forks the keeper, which leads the unit's session and group, makes
itself a child subreaper and spawns the command into its own group. Orphans of
the command's descendants come back to the keeper while the unit runs (it
reaps them); when the command ends the keeper exits as the command did, and
whatever is left (stragglers in the group, processes in other groups or
sessions) comes back to the zygote, which kills it (see ``server.reap``).

Signals for the unit go to the keeper's group: the keeper ignores every one it
may, so they reach the command alone, whose dispositions are reset to default;
SIGKILL takes both. The keeper dies with the zygote (parent-death SIGKILL), and
the zygote's guard kills what it leaves.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from typing import NoReturn

from workunits._sandbox.plan import Confinement
from workunits._sandbox.unit import UnitIsolation, UnitLimits
from workunits._wire.zygote_protocol import SpawnExec, exec_file_actions
from workunits._zygote import _linux

EXIT_NOT_STARTED = 127
_UNTOUCHABLE = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}
_IGNORED = tuple(s for s in signal.valid_signals() if s not in _UNTOUCHABLE and 0 < s < 65)


def run(
    msg: SpawnExec,
    path: str,
    output_fd: int,
    input_fd: int | None,
    report_fd: int,
    *,
    isolation: UnitIsolation,
    plan: Confinement | None,
    limits: UnitLimits,
) -> NoReturn:
    """In the forked keeper: confine itself (the command inherits it), start the command,
    report, wait, exit as it exited.

    ``report_fd`` gets ``+PID`` of the command, or ``-ERRNO\\0FILENAME[\\0TEXT]`` if
    it could not start, and is closed either way: the zygote waits on it.
    """
    try:
        isolation.confine(plan, limits, (output_fd,))
        command = _start(msg, path, output_fd, input_fd, plan)
    except OSError as exc:
        text = str(exc).encode(errors="replace")[:400] if not exc.filename else b""
        with contextlib.suppress(OSError):  # the zygote rebuilds the OSError from these
            filename = os.fsencode(exc.filename or "")
            os.write(report_fd, b"-%d\0%s\0%s" % (exc.errno or 0, filename, text))
        os._exit(EXIT_NOT_STARTED)
    os.write(report_fd, b"+%d" % command)  # the unit's pid, as its record shows it
    os.close(report_fd)
    os.close(output_fd)
    if input_fd is not None:
        os.close(input_fd)  # the command's own copy is its stdin
    _exit_like(_wait_for(command))


def _start(
    msg: SpawnExec, path: str, output_fd: int, input_fd: int | None, plan: Confinement | None
) -> int:
    cap = msg.limits.output_cap
    _linux.set_child_subreaper()
    for signum in _IGNORED:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_IGN)
    if cap is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    if msg.cwd is not None:
        os.chdir(msg.cwd)
    env = dict(os.environ if msg.env is None else msg.env)
    if plan is not None:
        env.update(plan.env)
    return os.posix_spawn(
        path,
        list(msg.argv),
        env,
        file_actions=exec_file_actions(output_fd, input_fd),
        setsigdef=_IGNORED,
        setsigmask=(),
    )


def _wait_for(command: int) -> int:
    """Reap adopted orphans as they end, until the command itself ends."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # pragma: no cover - the command is our child
            return 0
        if pid == command:
            return status


def _exit_like(status: int) -> NoReturn:
    """Exit with the command's status: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
            os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))
