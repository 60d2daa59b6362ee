"""One supervisor per state dir: an ``flock`` on ``<state_dir>/supervisor.lock``.

The kernel drops an ``flock`` when the last descriptor of its open file goes
away, so a supervisor killed with SIGKILL frees the state dir at once; there is
no stale lock file to clean up. The holder writes its pid into the file so
that a refused second supervisor can say who is in the way.

A descriptor inherited by a child keeps the lock alive. ``O_CLOEXEC`` covers
children that exec; for children that only fork (a zygote, a unit running
Python) an at-fork hook closes the descriptor in the child, so a unit
outliving a SIGKILLed supervisor never keeps the next one out. (Between the
fork and that hook the child briefly holds a copy: a supervisor started in
that instant still gets it: see ``_STRAY_HOLDER_GRACE``.)

``is_held`` tells a reader whether a supervisor runs on a state dir: it tries
a shared lock for an instant, on a descriptor opened read-only, so it works
in a read-only state dir and creates nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import weakref
from pathlib import Path

from workunits._core.errors import SupervisorBusy
from workunits._ledger import statedir
from workunits._ledger.sqlite.db import create_private_file
from workunits._util.procid import pid_exists

LOCK_FILE = "supervisor.lock"
_PID_WIDTH = 20  # the pid is written padded, in one pwrite, so a reader never sees half
# How long acquire() keeps trying, past its own timeout, while the lock's holder
# is no supervisor: the pid on record is blank or dead, so what holds it is a
# reader's ``is_held`` (an instant) or a child between fork and its at-fork hook.
_STRAY_HOLDER_GRACE = 1.0

_held: weakref.WeakSet[SupervisorLock] = weakref.WeakSet()


class SupervisorLock:
    """The state dir's supervisor lock. Used by one thread; not reentrant."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = statedir.prepare(state_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float | None = 0.0, *, poll_interval: float = 0.02) -> None:
        """Take the lock; with another holder, wait up to ``timeout`` s (None: forever).

        Raises SupervisorBusy naming the holder's pid when the wait runs out.
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this SupervisorLock")
        create_private_file(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self._wait(fd, timeout, poll_interval)
            os.pwrite(fd, f"{os.getpid():<{_PID_WIDTH}}\n".encode(), 0)
            os.ftruncate(fd, _PID_WIDTH + 1)
        except BaseException:
            os.close(fd)  # also drops the lock, if it was taken
            raise
        self._fd = fd
        _held.add(self)

    def _wait(self, fd: int, timeout: float | None, poll_interval: float) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not _try_lock(fd):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                stray = not _holder_alive(fd) and now < deadline + _STRAY_HOLDER_GRACE
                if not stray:
                    raise self._busy(fd, timeout)
            # flock has no timeout of its own; a short poll keeps the wait bounded
            # and the thread interruptible.
            time.sleep(poll_interval)

    def _busy(self, fd: int, timeout: float | None) -> SupervisorBusy:
        pid = _holder(fd)
        who = f"pid {pid}" if pid is not None else "a process whose pid is unknown"
        waited = f" after waiting {timeout} s" if timeout else ""
        if pid == os.getpid():
            return SupervisorBusy(
                f"this process (pid {pid}) already runs a supervisor on {self.path.parent}; "
                f"use that one (one per state dir), or close it before making another",
                pid,
            )
        return SupervisorBusy(
            f"another supervisor ({who}) is running on {self.path.parent}{waited}; "
            f"stop it, connect to it as a client, or use another state dir",
            pid,
        )

    def release(self) -> None:
        """Give the lock up; a no-op when not held."""
        fd, self._fd = self._fd, None
        _held.discard(self)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(fd, b" " * _PID_WIDTH + b"\n", 0)
            os.close(fd)

    def holder_pid(self) -> int | None:
        """The pid written by the current holder, if any (also when nobody holds it)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return _holder(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> SupervisorLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def is_held(state_dir: str | os.PathLike[str]) -> bool:
    """True while a supervisor holds the lock of ``state_dir``; changes and creates nothing.

    Any thread. The shared lock it tries is held only between two system calls.
    """
    try:
        fd = os.open(Path(state_dir) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # no supervisor ever ran here
    try:
        return not _try_lock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)  # drops the shared lock, if it was taken


def _holder_alive(fd: int) -> bool:
    pid = _holder(fd)
    return pid is not None and pid_exists(pid)


def _try_lock(fd: int, mode: int = fcntl.LOCK_EX) -> bool:
    """Take ``mode`` without waiting; False if held: the supervisor's lock and a reader's look."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _holder(fd: int) -> int | None:
    text = os.pread(fd, _PID_WIDTH + 1, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _forget_in_child() -> None:
    # Runs in a freshly forked child: its copies of the descriptors must not
    # keep the parent's lock alive. Closing them leaves the parent's lock held.
    for lock in list(_held):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)
