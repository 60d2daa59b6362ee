"""The life of a warm process, in the process itself: get ready, wait for one unit, run it.

The zygote forks a spare ahead of demand. The spare does at once what every
unit process does and what needs no unit (see ``unit_process.detach``, then the
capture's pipes and pump), names itself ``workunits-spare`` and blocks on its
assignment socket; one still waiting after a moment rehearses a unit's start
(see ``warm``). The zygote hands it one unit: a ``SpawnCall`` with the
unit's transcript and channel descriptors (and a large payload's memfd). In
cgroup mode the spare was forked into a cgroup of its own, which becomes the
unit's. The spare then applies the unit's limits and runs the unit,
and its exit code is the unit's. End of file instead of a unit (the zygote aged
it out, or is gone) ends it quietly. Runs exactly one unit: nothing here loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket

from workunits._unit.child import prepare, rehearse, report_start_failure, run_unit
from workunits._util.framing import FrameReader
from workunits._wire.zygote_protocol import SpawnCall
from workunits._zygote import _linux, payload, unit_process

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
    sock.close()
    if assignment is None:
        return EXIT_UNUSED
    call, fds = assignment
    _linux.set_name(name)
    try:
        if call.payload_in_fd:  # read here, never in the zygote (see payload)
            call = dataclasses.replace(call, payload=payload.read_fd(fds[2]))
        unit_process.apply_limits(call.limits)
        return run_unit(call, fds[0], fds[1], capture)
    except BaseException as exc:
        report_start_failure(fds[1], exc)  # then the exit code says the runtime broke
        raise


def _wait_for_unit(
    sock: socket.socket, rehearse_after: float
) -> tuple[SpawnCall, list[int]] | None:
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
            if not isinstance(call, SpawnCall) or len(fds) != 2 + call.payload_in_fd:
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
