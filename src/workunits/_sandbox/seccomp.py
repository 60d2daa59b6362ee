"""A seccomp filter for a unit's network policy, assembled here as classic BPF.

Landlock filters TCP ``bind``/``connect`` by port, and nothing else: not UDP,
not raw sockets, not SCTP, and not a socket made by io_uring (whose work
skips system call filters). So a unit without network (``network=False``)
also runs under this filter, which refuses ``socket()`` for every family but
AF_UNIX and refuses ``io_uring_setup``; a unit held to TCP ports gets TCP
(protocol 0 or IPPROTO_TCP) on AF_INET and AF_INET6 besides, which Landlock
then holds to the ports. Refusals are ``EPERM`` (a PermissionError), never a
kill: a program may handle them.

The filter checks the architecture first: a system call made through another
ABI (32-bit x86 on x86_64, or x32) is refused outright, since its numbers
differ. Filters exist for x86_64 and aarch64 (``supported``); elsewhere the
network policy cannot be enforced and says so (``probe``).
"""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass

from workunits._sandbox import _libc

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
SOCK_STREAM = 1
SOCK_TYPE_MASK = 0xF
IPPROTO_TCP = 6

# struct seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (the low half first).
_NR, _ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i


@dataclass(frozen=True, slots=True)
class _Abi:
    audit_arch: int
    socket: int
    socketpair: int
    x32: bool = False  # x86_64's second ABI: numbers with bit 30 set


_ABIS = {
    "x86_64": _Abi(0xC000003E, 41, 53, x32=True),
    "aarch64": _Abi(0xC00000B7, 198, 199),
}


def supported() -> bool:
    """Whether this architecture has a filter (the kernel's support is ``available``)."""
    return _libc.machine() in _ABIS


def available() -> bool:
    """Whether this kernel filters system calls (``Seccomp:`` in /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False


class _Filter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class _Program(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter)))


def network_program(tcp: bool) -> list[tuple[int, int, int, int]]:
    """The filter's instructions: AF_UNIX sockets only, or TCP ones too (``tcp``)."""
    abi = _ABIS[_libc.machine()]
    deny = RET_ERRNO | errno.EPERM
    code: list[tuple[int, int, int, int]] = []

    def emit(op: int, jt: int, jf: int, k: int) -> None:
        code.append((op, jt, jf, k))

    # Each conditional jump below skips to a return counted from its own position.
    emit(_LD_W_ABS, 0, 0, _ARCH)
    emit(_JEQ_K, 1, 0, abi.audit_arch)
    emit(_RET_K, 0, 0, deny)  # another ABI: its numbers are not these
    emit(_LD_W_ABS, 0, 0, _NR)
    if abi.x32:
        emit(_JGE_K, 0, 1, 0x40000000)
        emit(_RET_K, 0, 0, deny)
    emit(_JEQ_K, 0, 1, _libc.SYS_IO_URING_SETUP)
    emit(_RET_K, 0, 0, deny)
    emit(_JEQ_K, 1, 0, abi.socket)
    emit(_RET_K, 0, 0, RET_ALLOW)
    # socket(domain, type, protocol)
    emit(_LD_W_ABS, 0, 0, _arg(0))
    emit(_JEQ_K, 0, 1, AF_UNIX)
    emit(_RET_K, 0, 0, RET_ALLOW)
    if tcp:
        emit(_JEQ_K, 1, 0, AF_INET)
        emit(_JEQ_K, 0, 7, AF_INET6)
        emit(_LD_W_ABS, 0, 0, _arg(1))
        emit(_AND_K, 0, 0, SOCK_TYPE_MASK)
        emit(_JEQ_K, 0, 4, SOCK_STREAM)
        emit(_LD_W_ABS, 0, 0, _arg(2))
        emit(_JEQ_K, 1, 0, 0)
        emit(_JEQ_K, 0, 1, IPPROTO_TCP)
        emit(_RET_K, 0, 0, RET_ALLOW)
    emit(_RET_K, 0, 0, deny)
    return code


def load(instructions: list[tuple[int, int, int, int]]) -> None:
    """Install the filter on this thread (and what it starts); needs ``no_new_privs``."""
    array = (_Filter * len(instructions))(*(_Filter(*i) for i in instructions))
    program = _Program(len(instructions), array)
    _libc.prctl(_libc.PR_SET_SECCOMP, _libc.SECCOMP_MODE_FILTER, ctypes.addressof(program))
