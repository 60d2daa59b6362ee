"""The system calls the sandbox needs, through ctypes: no compiler, no new dependency.

Landlock has no libc wrapper, so it is called by number (``syscall``); the
numbers are the same on every architecture Linux added them for (they came
after the numbering was unified), and so is ``io_uring_setup``'s. The few
numbers that differ per architecture (``socket``, ``socketpair``) live in
``seccomp`` beside the filter that needs them, keyed by ``machine()``.

Everything here is a thin, typed wrapper that raises ``OSError`` with the
errno the kernel gave: callers decide what a refusal means.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import signal
import sys

LINUX = sys.platform.startswith("linux")

# System call numbers shared by every architecture (asm-generic and x86 alike).
SYS_IO_URING_SETUP = 425
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

# prctl options
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_GET_CHILD_SUBREAPER = 37
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
SECCOMP_MODE_FILTER = 2

# unshare / setns flags
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000

# mount flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
# Resolved here, once, in every process that imports this module (the zygote does
# before it forks): a unit's way in then looks no symbol up.
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_unshare = _libc.unshare
_unshare.argtypes = [ctypes.c_int]
_setns = _libc.setns
_setns.argtypes = [ctypes.c_int, ctypes.c_int]
_mount = _libc.mount
_mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_capget = _libc.capget
_capset = _libc.capset


def machine() -> str:
    """The CPU architecture as the kernel names it (``x86_64``, ``aarch64``...)."""
    return platform.machine()


def _raise(what: str) -> None:
    errno = ctypes.get_errno()
    raise OSError(errno, f"{what}: {os.strerror(errno)}")


def syscall(number: int, *args: object) -> int:
    """``syscall(number, *args)``; OSError on -1."""
    result = int(_syscall(ctypes.c_long(number), *args))
    if result == -1:
        _raise(f"system call {number}")
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    result = int(_prctl(option, arg2, arg3, 0, 0))
    if result == -1:
        _raise(f"prctl({option})")
    return result


def die_with(parent: int) -> None:
    """SIGKILL this (forked) process when ``parent``, the single thread that forked it,
    ends; exit at once if it has ended already (before the prctl took effect).

    The zygote's own ``set_parent_death_signal`` (``_zygote._linux``) is in a layer
    above this one, which the namespace helper may not import."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def child_subreaper() -> bool:
    """Whether this process is a child subreaper (orphans below it come back to it)."""
    flag = ctypes.c_int(0)
    prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag))
    return flag.value != 0


def set_no_new_privs() -> None:
    """From now on no exec gives more privileges (setuid, file capabilities): inherited."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def no_new_privs() -> bool:
    return prctl(PR_GET_NO_NEW_PRIVS) == 1


def set_dumpable(on: bool) -> None:
    """Not dumpable: ``/proc/PID`` of this process is closed to other processes of its user
    (root's), and nothing of its user may ptrace it without CAP_SYS_PTRACE."""
    prctl(PR_SET_DUMPABLE, 1 if on else 0)


def dumpable() -> bool:
    return prctl(PR_GET_DUMPABLE) == 1


def unshare(flags: int) -> None:
    if _unshare(flags) != 0:
        _raise("unshare")


def setns(fd: int, nstype: int) -> None:
    if _setns(fd, nstype) != 0:
        _raise("setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    if _mount(enc(source), enc(target), enc(fstype), flags, data.encode()) != 0:
        _raise(f"mount on {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


_CAP_V3 = 0x20080522


def drop_capabilities(keep_none: bool, drop: tuple[int, ...] = ()) -> None:
    """Clear capabilities of this thread: all of them (``keep_none``), or those in ``drop``,
    also from the bounding set, so no later exec gets them back."""
    header = _CapHeader(_CAP_V3, 0)
    data = (_CapData * 2)()
    if _capget(ctypes.byref(header), data) != 0:
        _raise("capget")
    if keep_none:
        drop = tuple(range(64))
    for cap in drop:
        index, bit = divmod(cap, 32)
        mask = ~(1 << bit) & 0xFFFFFFFF
        data[index].effective &= mask
        data[index].permitted &= mask
        data[index].inheritable &= mask
    for cap in drop:  # the bounding set: beyond the kernel's last capability is EINVAL
        if _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _raise(f"dropping capability {cap} from the bounding set")
    if _capset(ctypes.byref(header), data) != 0:
        _raise("capset")


SYS_MOUNT_SETATTR = 442  # shared by every architecture, as the Landlock calls
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def make_read_only(path: str) -> None:
    """Make the mount at ``path`` and every mount below it read-only (this namespace only).

    Binds ``path`` onto itself first, so a directory that is not a mount point
    (``/proc/sys``) becomes one and the change stays beneath it.
    """
    mount(path, path, None, MS_BIND | MS_REC, "")
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    syscall(
        SYS_MOUNT_SETATTR,
        ctypes.c_int(AT_FDCWD),
        os.fsencode(path),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
