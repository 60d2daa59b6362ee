"""The life of a warm process, in the process itself: get ready, wait for one unit, run it.

The zygote forks a spare ahead of demand. The spare does at once what every
unit process does and what needs no unit (see ``unit_process.detach``, then the
capture's pipes and pump), names itself ``workunits-spare`` and blocks on its
assignment socket; one still waiting after a moment rehearses a unit's start
(see ``warm``). The zygote hands it one unit: a ``SpawnCall`` with the
unit's transcript and channel descriptors (and a large payload's memfd), or a
shell unit's command (``RunCommand``) with its output and input descriptors.
In cgroup mode the spare was forked into a cgroup of its own, which becomes
the unit's. The spare then applies the unit's limits and runs the unit, or
execs the command, and its exit code is the unit's. A command that cannot
start is reported on the assignment socket, which otherwise closes at the
exec: the zygote waits for one or the other, as for a command it forks. End of
file instead of a unit (the zygote aged it out, or is gone) ends it quietly.
Runs exactly one unit: nothing here loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket

from workunits._unit.child import prepare, rehearse, report_start_failure, run_unit
from workunits._util.framing import FrameReader
from workunits._wire.zygote_protocol import RunCommand, SpawnCall
from workunits._zygote import _linux, commands, keeper, payload, unit_process

NAME = b"workunits-spare"
EXIT_UNUSED = 0
MAX_FDS = 3  # the unit's transcript and channel, and its payload when that is large


def run(sock: socket.socket, rehearse_after: float) -> int:
    """In the forked spare, after ``unit_process.detach``: the exit code of its one unit.

    ``rehearse_after``: seconds without a unit before the spare rehearses one's
    start (see ``warm``); 0: at once, before it waits.
    """
    capture = prepare()
    name = _linux.process_name()
    _linux.set_name(NAME)
    assignment = _wait_for_unit(sock, rehearse_after)
    if assignment is None:
        sock.close()
        return EXIT_UNUSED
    call, fds = assignment
    if isinstance(call, RunCommand):
        _exec_command(call, fds, sock.fileno())  # returns only if the command cannot start
        return keeper.EXIT_NOT_STARTED
    sock.close()
    _linux.set_name(name)
    try:
        if call.payload_in_fd:  # read here, never in the zygote (see payload)
            call = dataclasses.replace(call, payload=payload.read_fd(fds[2]))
        unit_process.apply_limits(call.limits)
        return run_unit(call, fds[0], fds[1], capture)
    except BaseException as exc:
        report_start_failure(fds[1], exc)  # then the exit code says the runtime broke
        raise


def _exec_command(run: RunCommand, fds: list[int], report_fd: int) -> None:
    """Exec the command (this process becomes it); what failed goes to ``report_fd``."""
    msg = run.msg

    def ready() -> None:
        unit_process.apply_limits(msg.limits)
        # Nothing of the spare's goes past the exec: its capture's pipes, and the
        # descriptors just received (the kernel gives them without close-on-exec;
        # the command gets its copies as fds 0, 1 and 2).
        for fd in _open_fds():
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.set_inheritable(fd, False)
        # As posix_spawn gives a command: default actions (what the capture or a
        # rehearsal set would otherwise carry over when ignored) and no blocked signal.
        for signum in unit_process.RESET_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())

    env = {} if msg.confinement is None else dict(msg.confinement.env)
    input_fd = fds[1] if msg.stdin else None
    commands.exec_or_report(
        msg, run.path, fds[0], input_fd, env=env, report_fd=report_fd, ready=ready
    )


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: what the descriptor limit allows (slower, as thorough)
        return list(range(3, os.sysconf("SC_OPEN_MAX")))


def _wait_for_unit(
    sock: socket.socket, rehearse_after: float
) -> tuple[SpawnCall | RunCommand, list[int]] | None:
    """Block until the zygote sends one unit; None at end of file (or a broken assignment).

    A spare still waiting after ``rehearse_after`` seconds rehearses a unit's
    way in (``child.rehearse``) and waits on. One taken sooner does not: units
    come back to back then, and the rehearsal's CPU would be taken from them.
    """
    reader = FrameReader()
    fds: list[int] = []
    if rehearse_after > 0:
        sock.settimeout(rehearse_after)
    else:
        _rehearse()
    while True:
        try:
            data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, MAX_FDS)
        except InterruptedError:  # pragma: no cover - retried by Python; kept for clarity
            continue
        except TimeoutError:
            sock.settimeout(None)
            _rehearse()
            continue
        except OSError:
            data, got = b"", []
        fds.extend(got)
        if not data:
            _close(fds)
            return None
        frames = reader.feed(data)
        if frames:
            call = frames[0]
            if isinstance(call, SpawnCall):
                wanted = 2 + call.payload_in_fd
            elif isinstance(call, RunCommand):
                wanted = call.msg.fd_count
            else:
                wanted = -1
            if len(fds) != wanted:
                _close(fds)
                return None
            return call, fds


def _rehearse() -> None:
    """``rehearse``, whose failure (out of descriptors?) costs speed, never the spare."""
    with contextlib.suppress(Exception):
        rehearse()


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
