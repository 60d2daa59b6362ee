"""Large unit payloads cross to the unit process in a sealed memfd, not in a frame.

The zygote is single-threaded: a 64 MiB payload in its control frame would
stop every other spawn while it read, unpickled and copied the bytes, and the
supervisor's sender would wait on it. An anonymous memory file (``memfd``)
is written once by the supervisor, sealed so nobody can change it after, and
its descriptor rides the frame (SCM_RIGHTS); only the forked unit reads it.
Nothing reaches the disk and nothing is left behind: the file is gone when
its last descriptor closes, however the processes end.
"""

from __future__ import annotations

import fcntl
import os

FD_PAYLOAD = 1 << 20
"""Payloads above this many bytes travel in a memfd."""

_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def to_memfd(data: bytes, name: str) -> int:
    """A sealed, read-only-from-now memfd holding ``data``, positioned at its start."""
    fd = os.memfd_create(f"workunits-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                done += os.write(fd, view[done:])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int) -> bytes:
    """Everything in ``fd`` from its start; closes it. Runs in the unit process."""
    with os.fdopen(fd, "rb", closefd=True) as f:
        f.seek(0)
        return f.read()
