"""``NameWatch``: has any of a few names been unlinked, renamed or replaced? (inotify)

A path stays bound to the same file unless a directory entry on its way
changes: the name itself is removed, renamed or renamed over (an event in its
directory), or one of its directories is moved or removed (an event on that
directory itself). Linux queues such an event on an inotify descriptor while
the system call that makes the change runs, so one non-blocking ``read`` that
finds nothing proves that no such change happened since the last read: the
cost of asking is one system call, however many names are watched.

What this cannot see, and the caller must check otherwise from time to time:
a file system mounted over one of the directories. A path through a symbolic
link is not watched at all (``watch`` returns None): the link's target could
change by an entry this does not watch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import struct
import sys
import termios
from collections.abc import Iterable

# <sys/inotify.h>
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

_SELF = _IN_DELETE_SELF | _IN_MOVE_SELF
_ENTRIES = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class NameWatch:
    """Watches names (files, each in a directory) for any change of the entries that
    lead to them. ``changed`` from one thread at a time (the caller's lock)."""

    def __init__(self, fd: int, names: dict[int, frozenset[bytes]], selves: frozenset[int]):
        self._fd = fd
        self._names = names  # watch descriptor of a directory -> the names watched in it
        self._selves = selves  # watch descriptors whose own move or removal counts
        self._broken = False
        self._queued = bytearray(4)  # FIONREAD's answer: bytes of events waiting

    @classmethod
    def watch(cls, paths: Iterable[str | os.PathLike[str]]) -> NameWatch | None:
        """A watch of ``paths`` (absolute or not); None where it cannot be made (not Linux,
        a symbolic link on the way, no inotify descriptor left, a directory not readable)."""
        if _LIBC is None:
            return None
        by_dir: dict[str, set[bytes]] = {}
        for path in paths:
            full = os.path.abspath(path)
            directory, name = os.path.split(full)
            if os.path.realpath(directory) != directory:
                return None  # a symbolic link on the way: its target is not watched
            by_dir.setdefault(directory, set()).add(os.fsencode(name))
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None  # e.g. max_user_instances reached: the caller checks by stat
        try:
            names: dict[int, frozenset[bytes]] = {}
            selves: set[int] = set()
            ancestors: set[str] = set()
            for directory, wanted in by_dir.items():
                wd = _add(fd, directory, _ENTRIES | _SELF)
                names[wd] = frozenset(wanted)
                selves.add(wd)
                below, above = directory, os.path.dirname(directory)
                while above != below and above not in ancestors:
                    ancestors.add(above)
                    below, above = above, os.path.dirname(above)
            for ancestor in ancestors:
                selves.add(_add(fd, ancestor, _SELF))
        except OSError:
            os.close(fd)
            return None
        return cls(fd, names, frozenset(selves))

    def changed(self) -> bool:
        """True when an entry on the way to a watched name changed since the last call
        (or the watch could not tell: its queue overflowed, a watch was dropped); then
        the caller looks for itself. Always True once the watch is closed or broken."""
        if self._broken:
            return True
        try:
            # Asked first: a read that finds nothing raises, and that costs three
            # times the question (the usual answer is "nothing").
            fcntl.ioctl(self._fd, termios.FIONREAD, self._queued, True)
        except OSError:
            self._broken = True
            return True
        if not any(self._queued):
            return False
        seen = False
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return seen
            except OSError:
                self._broken = True
                return True
            seen = self._relevant(data) or seen

    def _relevant(self, data: bytes) -> bool:
        found = False
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & (_IN_Q_OVERFLOW | _IN_IGNORED):
                # Events were lost, or a directory's watch is gone (its directory was
                # removed, its file system unmounted): nothing can be proved from now on.
                self._broken = True
                return True
            if (mask & _SELF and wd in self._selves) or name in self._names.get(wd, ()):
                found = True
        return found

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        self._broken = True


def _add(fd: int, directory: str, mask: int) -> int:
    assert _LIBC is not None
    wd = _LIBC.inotify_add_watch(fd, os.fsencode(directory), mask | _IN_ONLYDIR | _IN_DONT_FOLLOW)
    if wd < 0:
        code = ctypes.get_errno() or errno.EINVAL
        raise OSError(code, os.strerror(code), directory)
    return int(wd)
