"""What crosses between the supervisor and a remote unit (pickled by Ray).

Up the stream go lists of frames: these, plus ``Progress``, ``Checkpoint``,
``Error`` and (from a teammate) ``Answer`` from ``runtime.messages``. Everything
a user wrote travels as bytes (JSON or cloudpickle) or str, so the supervisor
never runs a unit's unpickling code when it reads a stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from workunits._wire import frames as m


@dataclass(frozen=True, slots=True)
class RemoteCall:
    """What a Ray worker needs to run one attempt of a unit."""

    unit_id: str
    kind: str
    attempt: int
    checkpoint: bytes | None  # orjson of the checkpoint to resume from
    payload: bytes  # cloudpickled (fn, args, kwargs), or (cls, args, kwargs) for a teammate

    @property
    def key(self) -> str:
        """The cancel board's key: the attempt fences a stale request out."""
        return f"{self.unit_id}.{self.attempt}"


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    host: str
    node_id: str


@dataclass(frozen=True, slots=True)
class Output:
    stream: str  # "stdout" or "stderr"
    text: str


@dataclass(frozen=True, slots=True)
class Emitted:
    data: bytes  # orjson of the user's event mapping


@dataclass(frozen=True, slots=True)
class Returned:
    result: m.ReturnValue
    preview: str  # for the transcript, when the value is pickled rather than JSON
