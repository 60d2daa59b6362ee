"""Messages between the supervisor and its zygote (pickled frames, see _util.framing)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-unit resource limits, applied in the unit process before it runs."""

    output_cap: int | None = None  # RLIMIT_FSIZE
    memory: int | None = None  # RLIMIT_AS
    idle_priority: bool = False  # SCHED_IDLE where the kernel has it, else nice 19


@dataclass(frozen=True, slots=True)
class SpawnExec:
    """Fork and exec a command. Attached fds: the output file (becomes fds 1 and 2), and
    with ``stdin`` the read end of the pipe the supervisor writes to (becomes fd 0)."""

    unit_id: str
    argv: tuple[str, ...]
    cwd: str | None
    env: Mapping[str, str] | None
    limits: Limits = field(default_factory=Limits)
    stdin: bool = False

    @property
    def fd_count(self) -> int:
        """How many descriptors travel with this request."""
        return 2 if self.stdin else 1


def exec_file_actions(output_fd: int, input_fd: int | None) -> list[tuple[Any, ...]]:
    """A command's fds 0, 1 and 2: its stdin (the pipe, or /dev/null) and its output."""
    stdin: tuple[Any, ...] = (
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        if input_fd is None
        else (os.POSIX_SPAWN_DUP2, input_fd, 0)
    )
    return [stdin, (os.POSIX_SPAWN_DUP2, output_fd, 1), (os.POSIX_SPAWN_DUP2, output_fd, 2)]


@dataclass(frozen=True, slots=True)
class SpawnCall:
    """Fork and run a Python unit. Attached fds: transcript, channel (and the payload)."""

    unit_id: str
    kind: str
    payload: bytes  # cloudpickled (callable, args, kwargs), opened only in the unit process
    attempt: int = 1
    # A large payload travels as a third attached fd (a sealed memfd) instead of in
    # this frame: the single-threaded zygote then never reads it, and the unit does.
    payload_in_fd: bool = False
    checkpoint: bytes | None = None  # orjson of the last checkpoint, for a resumed attempt
    first_seq: int = 1  # a resumed attempt continues its transcript's sequence
    limits: Limits = field(default_factory=Limits)
    # Transcript bytes the unit's capture writes at most; it reports OutputCapped there.
    transcript_cap: int | None = None
    traceparent: str | None = None  # the unit's span (TRACEPARENT; _runtime.tracing)


@dataclass(frozen=True, slots=True)
class Signal:
    """Signal a unit's process group (only while its leader is unreaped)."""

    unit_id: str
    signum: int


@dataclass(frozen=True, slots=True)
class Spawned:
    unit_id: str
    pid: int


@dataclass(frozen=True, slots=True)
class SpawnFailed:
    unit_id: str
    error: str


@dataclass(frozen=True, slots=True)
class Exited:
    unit_id: str
    pid: int
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True, slots=True)
class Ready:
    pid: int


# -- on the wire ------------------------------------------------------------------------
# A spawn request and the two reports every unit gets (spawned, exited) travel as
# tuples of plain values, not as the dataclasses above. Pickling a slots dataclass
# runs Python code (its __getstate__ and __setstate__, its fields), and the zygote
# forks for every Python unit: after a fork, each page that code writes is copied
# on its first write. Decoding and re-encoding one SpawnCall right after a fork took
# ~130 such copies, ~0.3 ms, on the unit's way in (bench/RESULTS.md). The zygote
# passes a call's pickled SpawnCall on unopened: to the spare, or to the child it
# forks, which opens it.

CALL = "call"
SPAWNED = "spawned"
EXITED = "exited"

# (CALL, unit_id, kind, payload_in_fd, the pickled SpawnCall)
CallRequest = tuple[str, str, str, bool, bytes]


def call_request(call: SpawnCall) -> CallRequest:
    """``call`` as the supervisor sends it to the zygote."""
    body = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
    return (CALL, call.unit_id, call.kind, call.payload_in_fd, body)


def is_call_request(message: object) -> TypeGuard[CallRequest]:
    return type(message) is tuple and len(message) == 5 and message[0] == CALL


def spawned(unit_id: str, pid: int) -> tuple[str, str, int]:
    """``Spawned`` as the zygote sends it (its pidfd attached)."""
    return (SPAWNED, unit_id, pid)


def exited(
    unit_id: str, pid: int, exit_code: int | None, signum: int | None
) -> tuple[str, str, int, int | None, int | None]:
    """``Exited`` as the zygote sends it."""
    return (EXITED, unit_id, pid, exit_code, signum)


def from_zygote(message: object) -> object:
    """A message from the zygote, its wire tuples made the dataclasses above."""
    if type(message) is tuple and message:
        if message[0] == SPAWNED:
            return Spawned(*message[1:])
        if message[0] == EXITED:
            return Exited(*message[1:])
    return message
