"""Messages on an agent's channel (pickled frames, see _framing).

Values that are the user's (results, exceptions, specs of child agents) travel
as cloudpickle bytes and are opened only where the user asks for them, so the
supervisor never runs a unit's unpickling code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workunits._record import WorkRecord

# -- unit process -> its WorkActor --------------------------------------------


@dataclass(frozen=True, slots=True)
class Progress:
    fraction: float | None
    message: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    state: bytes  # orjson


@dataclass(frozen=True, slots=True)
class Result:
    value: bytes
    format: str  # "json" or "pickle"


@dataclass(frozen=True, slots=True)
class Error:
    type: str
    message: str
    traceback: str
    cause: bytes | None  # cloudpickled exception when it pickles


@dataclass(frozen=True, slots=True)
class Spawn:
    req: int
    letter: str
    spec: Any
    description: str
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Control:
    """kill / cancel / get a unit by ID on behalf of the unit process."""

    req: int
    op: str
    target: str
    arg: Any = None


# -- WorkActor -> unit process -------------------------------------------------


@dataclass(frozen=True, slots=True)
class CancelRequested:
    pass


@dataclass(frozen=True, slots=True)
class Reply:
    req: int
    ok: bool
    value: Any  # the answer, or an error message when not ok


@dataclass(frozen=True, slots=True)
class ChildEnded:
    record: WorkRecord
