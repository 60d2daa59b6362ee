"""Messages between the supervisor and its zygote (pickled frames, see _framing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-unit resource limits, applied in the unit process before it runs."""

    output_cap: int | None = None  # RLIMIT_FSIZE
    memory: int | None = None  # RLIMIT_AS
    idle_priority: bool = False  # SCHED_IDLE where the kernel has it, else nice 19


@dataclass(frozen=True, slots=True)
class SpawnExec:
    """Fork and exec a command. Attached fd: the output file (becomes fds 1 and 2)."""

    unit_id: str
    argv: tuple[str, ...]
    cwd: str | None
    env: Mapping[str, str] | None
    limits: Limits = field(default_factory=Limits)


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
