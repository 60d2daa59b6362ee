"""Landlock: unprivileged access control the kernel applies to a process and its children.

A ruleset names the accesses it *handles*; a process that restricts itself
with it (``restrict_self``) keeps only the handled accesses its rules grant,
beneath the directories they name, and on the TCP ports they name. Every
``restrict_self`` adds a layer (a domain): layers only ever narrow, and they
are inherited through fork and exec. Besides the rules, a domain:

- may not ptrace, or open ``/proc/PID/{mem,environ,fd,root...}`` of, any
  process outside it (ABI 1);
- may not mount, unmount or pivot_root, once it handles a filesystem access;
- with ``SCOPE_SIGNAL`` (ABI 6), may not signal a process outside it;
- with ``SCOPE_ABSTRACT_UNIX_SOCKET`` (ABI 6), may not connect to an
  abstract UNIX socket made outside it.

A ruleset is a descriptor, reusable: the zygote builds the default one once
and every unit it forks restricts itself with it, each into a domain of its
own (so units cannot signal one another). ``restrict_self`` needs
``no_new_privs`` or CAP_SYS_ADMIN, and applies to the calling thread only:
call it before the process starts any thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from collections.abc import Iterable

from workunits._sandbox import _libc

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

# Filesystem accesses, with the ABI that brought each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: link or rename across directories
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

BIND_TCP = 1 << 0  # ABI 4
CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
# Every access that changes the filesystem (beneath a directory: its files' contents,
# new entries, removals, renames and links).
WRITE = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
# Accesses that make sense on a file (a rule on a regular file may only grant these).
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}


def fs_accesses(abi: int) -> int:
    """Every filesystem access ABI ``abi`` knows."""
    if abi <= 0:
        return 0
    return _FS_BY_ABI.get(abi, (1 << 16) - 1)


def net_accesses(abi: int) -> int:
    return BIND_TCP | CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def abi() -> int:
    """The Landlock ABI this kernel offers; 0 when it has none (or it is disabled)."""
    if not _libc.LINUX:
        return 0
    try:
        return _libc.syscall(
            _libc.SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION
        )
    except OSError:  # ENOSYS: not built in; EOPNOTSUPP: not enabled at boot
        return 0


def create(handled_fs: int, handled_net: int, scoped: int, version: int) -> int:
    """A new ruleset's descriptor (close-on-exec). ``scoped`` is left out below ABI 6,
    whose kernels refuse the longer structure."""
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 16
    if version < 4:
        size = 8
    return _libc.syscall(
        _libc.SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0
    )


def allow_beneath(ruleset: int, path: str, access: int) -> bool:
    """Grant ``access`` beneath ``path`` (on the file itself, if it is not a directory);
    False when ``path`` does not exist (a rule for nothing is no rule)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FILE_ONLY
        if not access:
            return True
        attr = _PathBeneathAttr(access, fd)
        _add_rule(ruleset, RULE_PATH_BENEATH, attr)
    finally:
        os.close(fd)
    return True


def allow_port(ruleset: int, port: int, access: int) -> None:
    _add_rule(ruleset, RULE_NET_PORT, _NetPortAttr(access, port))


def restrict_self(ruleset: int) -> None:
    """Enter a new domain made of ``ruleset`` (this thread, and everything it starts)."""
    _libc.syscall(_libc.SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)


def build(
    version: int,
    *,
    handled_fs: int,
    rules: Iterable[tuple[str, int]],
    handled_net: int = 0,
    ports: Iterable[tuple[int, int]] = (),
    scoped: int = 0,
) -> int:
    """A ruleset descriptor with ``rules`` (path, access) and ``ports`` (port, access);
    the caller closes it."""
    fd = create(handled_fs, handled_net, scoped, version)
    try:
        for path, access in rules:
            allow_beneath(fd, path, access & handled_fs)
        for port, access in ports:
            allow_port(fd, port, access & handled_net)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd


def allow_fd(ruleset: int, fd: int, access: int) -> None:
    """Grant ``access`` on the file open as ``fd`` (a unit's own output, by its descriptor:
    its path is in the hidden state dir)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return
    _add_rule(ruleset, RULE_PATH_BENEATH, _PathBeneathAttr(access & FILE_ONLY, fd))


def _add_rule(ruleset: int, kind: int, attr: ctypes.Structure) -> None:
    _libc.syscall(_libc.SYS_LANDLOCK_ADD_RULE, ruleset, kind, ctypes.byref(attr), 0)
