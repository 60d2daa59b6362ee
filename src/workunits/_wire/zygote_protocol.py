"""Messages between the supervisor and its zygote (pickled frames, see _util.framing)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from workunits._sandbox.plan import Confinement


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
    # None: unconfined (``Sandbox.none()``, ``isolation="off"``); see ``_sandbox.plan``.
    confinement: Confinement | None = None

    @property
    def fd_count(self) -> int:
        """How many descriptors travel with this request."""
        return 2 if self.stdin else 1


@dataclass(frozen=True, slots=True)
class RunCommand:
    """A command under the default protection, handed to a warm process (confined when it
    was forked) to exec: ``path`` is its program as the zygote found it on the unit's
    PATH. Attached fds: as ``SpawnExec``'s."""

    msg: SpawnExec
    path: str


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
    # None: unconfined (``Sandbox.none()``, ``isolation="off"``); see ``_sandbox.plan``.
    confinement: Confinement | None = None
    # The transcript's first line: the unit's policy and what of it is enforced.
    sandbox: Mapping[str, Any] | None = None


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
    limit: str | None = None  # the resource limit its tree ran into (a ``Reason`` value)


@dataclass(frozen=True, slots=True)
class Ready:
    pid: int
    # What of the default protection the zygote could not make, each "name: why".
    missing: tuple[str, ...] = ()


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

# What the zygote must know of a call's confinement without opening it: whether a
# warm process (confined ahead, or not at all) may run it, and its cgroup limits.
PLAN_DEFAULT = "default"  # the default protection only
PLAN_NONE = "none"  # unconfined
PLAN_OWN = "own"  # a policy of its own: a process forked for it

# (CALL, unit_id, kind, payload_in_fd, the pickled SpawnCall, plan,
#  (memory, processes, cpu_seconds))
CallRequest = tuple[str, str, str, bool, bytes, str, tuple[int | None, int | None, float | None]]


def plan_of(confinement: Confinement | None) -> str:
    if confinement is None:
        return PLAN_NONE
    return PLAN_DEFAULT if confinement.is_default else PLAN_OWN


def call_request(call: SpawnCall) -> CallRequest:
    """``call`` as the supervisor sends it to the zygote."""
    body = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
    c = call.confinement
    cgroup_limits = (None, None, None) if c is None else (c.memory, c.processes, c.cpu_seconds)
    plan = plan_of(c)
    return (CALL, call.unit_id, call.kind, call.payload_in_fd, body, plan, cgroup_limits)


def is_call_request(message: object) -> TypeGuard[CallRequest]:
    return type(message) is tuple and len(message) == 7 and message[0] == CALL


def spawned(unit_id: str, pid: int) -> tuple[str, str, int]:
    """``Spawned`` as the zygote sends it (its pidfd attached)."""
    return (SPAWNED, unit_id, pid)


def exited(
    unit_id: str, pid: int, exit_code: int | None, signum: int | None, limit: str | None = None
) -> tuple[str, str, int, int | None, int | None, str | None]:
    """``Exited`` as the zygote sends it."""
    return (EXITED, unit_id, pid, exit_code, signum, limit)


def from_zygote(message: object) -> object:
    """A message from the zygote, its wire tuples made the dataclasses above."""
    if type(message) is tuple and message:
        if message[0] == SPAWNED:
            return Spawned(*message[1:])
        if message[0] == EXITED:
            return Exited(*message[1:])
    return message
