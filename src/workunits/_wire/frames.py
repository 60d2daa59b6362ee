"""Messages on an agent's channel (pickled frames, see _util.framing).

Values that are the user's (results, exceptions, specs of child agents) travel
as cloudpickle bytes and are opened only where the user asks for them, so the
supervisor never runs a unit's unpickling code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from workunits._core.errors import SpecError
from workunits._core.record import WorkRecord

# The exit code of a unit process that stopped at a cancel it was asked for (it raised
# ``wu.Cancelled`` at a checkpoint, a progress report or a wait): its actor tells its
# end as the cancel, with no exit code -- the process did what was asked, it did not fail.
EXIT_CANCELLED = 75

# -- unit process -> its WorkActor --------------------------------------------


@dataclass(frozen=True, slots=True)
class Progress:
    fraction: float | None
    message: str
    evidence: dict[str, Any] | None = None  # strict JSON, checked in the unit process


@dataclass(frozen=True, slots=True)
class Checkpoint:
    state: bytes  # orjson
    # The seqs of signals the unit received since its last checkpoint: consumed
    # with this one, in its transaction (a resumed attempt gets the rest again).
    consumed: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReturnValue:
    value: bytes
    format: str  # "json" or "pickle"


@dataclass(frozen=True, slots=True)
class Error:
    type: str
    message: str
    traceback: str
    cause: bytes | None  # cloudpickled exception when it pickles
    # ``module:qualname`` of the exception's classes, most derived first: what a
    # retry policy is matched against, without unpickling ``cause``.
    error_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NoticeTaken:
    """The unit took (acknowledged) a child's notice from its mailbox."""

    work_id: str
    status: str


@dataclass(frozen=True, slots=True)
class OutputCapped:
    """The transcript reached the unit's output cap: the capture stopped writing it."""

    cap: int


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start a child of the asking unit: its kind's letter and spec, and its options."""

    req: int
    letter: str
    spec: Any
    options: Any  # a workunits._surface UnitOptions; its key is the unit's own (scoped there)
    restart: Any = None  # a teammate's restart policy (workunits._core.restart.Restart)
    # The span current where the unit asked (a W3C traceparent), when OpenTelemetry
    # is loaded in its process: the child's span's parent (supervisor.tracing).
    trace: str | None = None


@dataclass(frozen=True, slots=True)
class SpawnMany:
    """Children as one batch (``ctx.map``, ``ctx.submit_many``): one request, one ledger
    transaction; at most ``max_workers`` of them run at once (None: no limit of the
    batch's own). The items' ``req`` is unused. Answered with one ``(ok, id or error
    text)`` per item; a bad item fails the whole request before anything is written."""

    req: int
    items: tuple[Spawn, ...]
    max_workers: int | None = None


@dataclass(frozen=True, slots=True)
class Control:
    """kill / cancel / get a unit by ID on behalf of the unit process."""

    req: int
    op: str
    target: str
    arg: Any = None


@dataclass(frozen=True, slots=True)
class Send:
    """Tell or ask the teammate ``target`` (any unit may; the supervisor routes it).

    Answered with a ``Reply``: at once for a tell (delivered, or why not), with an
    ``Answer`` for an ask when the teammate answers or ends.
    """

    req: int
    target: str
    message: bytes  # cloudpickled; opened only in the teammate's process
    ask: bool


@dataclass(frozen=True, slots=True)
class Answer:
    """A teammate's answer to the ask ``token``: exactly one of result and error is set."""

    token: int
    result: ReturnValue | None
    error: Error | None


@dataclass(frozen=True, slots=True)
class MonitorMatch:
    """A monitor's matching line that passed its rate limit."""

    line: str
    at: float
    suppressed: int


# -- WorkActor -> unit process -------------------------------------------------


@dataclass(frozen=True, slots=True)
class CancelRequested:
    # A deploy's: the unit stops for the next supervisor to resume, not for good.
    handed_over: bool = False


@dataclass(frozen=True, slots=True)
class SignalArrived:
    """A signal for the unit (``ctx.wait_for``); ``seq`` orders and de-duplicates them."""

    seq: int
    name: str
    value: Any  # JSON, as it was sent


@dataclass(frozen=True, slots=True)
class Reply:
    req: int
    ok: bool
    value: Any  # the answer, or an error message when not ok


@dataclass(frozen=True, slots=True)
class ChildEnded:
    """A child's end, for the parent's ``wait`` and mailbox; ``redelivered``: an earlier
    attempt of the parent was sent it and did not acknowledge its notice."""

    record: WorkRecord
    redelivered: bool = False


@dataclass(frozen=True, slots=True)
class Deliver:
    """A message for a teammate; ``token`` names the ask to answer (0 for a tell)."""

    token: int
    message: bytes  # cloudpickled by the sender
    ask: bool


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the teammate after the messages sent before this one."""


# -- inside Deliver.message -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProxyCall:
    """A method call made through a teammate proxy: ``instance.name(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def encode_message(message: Any) -> bytes:
    """Pickle a teammate message in the sender's thread, so an unpicklable one fails there."""
    try:
        return bytes(cloudpickle.dumps(message))
    except Exception as exc:
        raise SpecError(
            f"cannot pickle the message ({type(message).__qualname__}) for the teammate: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
