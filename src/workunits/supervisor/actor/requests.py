"""What the facade asks of the supervisor actor: one frozen message per call, typed by its reply.

``Request[R]`` is answered with an ``R``: the actor's ``on_receive`` matches the
request and calls ``request.answer(value)``, which mypy checks against ``R``;
the facade's ``ask(request: Request[R]) -> R`` reads it back. So the contract
between the facade and the actor is checked at both ends, with no casts and no
dispatch by method name.

A request is always *asked* (``ActorRef.ask``, blocking or not), never told:
an exception raised while handling it belongs to the asker, to whom pykka
hands it. Tells from unit actors and the Reaper, and the Ticker's ticks, are
other messages (``supervisor.actor.supervisor_actor``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pykka

from workunits._core.mailbox import Mailbox
from workunits._core.query import Query
from workunits._core.record import OutputChunk, WorkRecord
from workunits._core.restart import Restart
from workunits._core.schedule import ScheduleInfo
from workunits._core.status import Reason
from workunits._surface._generated import UnitOptions
from workunits.actors.base import WorkActor
from workunits.supervisor.actor.asks import Route
from workunits.supervisor.actor.batches import BatchLimit
from workunits.supervisor.actor.registry import Change
from workunits.supervisor.actor.starts import Registered
from workunits.supervisor.actor.units import CheckpointSubscriber, Subscriber

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Request(Generic[R]):
    # The actor's answer, read by the asker once the ask returns (pykka's future
    # orders the write before the read). A list: the request itself stays frozen.
    _reply: list[R] = field(default_factory=list, init=False, repr=False, compare=False)
    # A deferred request (``defer``) is answered after ``on_receive`` returned --
    # a submit waits for its group's commit -- with an answer or an error, then
    # ``settle``; the event orders those writes before the asker's reads.
    _error: list[BaseException] = field(default_factory=list, init=False, repr=False, compare=False)
    _later: list[threading.Event] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def answer(self, value: R) -> None:
        """In the supervisor actor's thread: the reply to this request."""
        self._reply.append(value)

    def defer(self) -> None:
        """In the actor's thread, before ``on_receive`` returns: ``settle`` answers it later."""
        self._later.append(threading.Event())

    def fail(self, error: BaseException) -> None:
        """In the actor's thread: a deferred request's error, raised in the asker's thread."""
        self._error.append(error)

    def settle(self) -> None:
        """In the actor's thread: a deferred request's answer (or error) is in; wake the asker."""
        self._later[0].set()

    def wait_settled(self, timeout: float) -> bool:
        """In the asker's thread, after the ask returned: False if still unanswered in time."""
        return not self._later or self._later[0].wait(timeout)

    def answered(self) -> R:
        """In the asker's thread, after the ask returned (and ``wait_settled``)."""
        if self._error:
            raise self._error[0]
        if not self._reply:
            raise RuntimeError(f"the supervisor actor did not answer {self!r}")  # a bug
        return self._reply[0]


# -- the registration chokepoint and the kinds ---------------------------------------


@dataclass(frozen=True, slots=True)
class Register(Request[Registered]):
    """A submit: the kind's letter and spec, and the unit's options (``UnitOptions``)."""

    letter: str
    spec: Any
    options: UnitOptions = field(default_factory=UnitOptions)
    restart: Restart | None = None
    trace: str | None = None  # the submitter's current span (supervisor.tracing)
    batch: BatchLimit | None = None  # the batch it runs in (supervisor.actor.batches)


@dataclass(frozen=True, slots=True)
class SubmitMany(Request[list[WorkRecord | BaseException]]):
    """A batch: every item checked, then all written in one transaction, then admitted.

    A bad item fails the whole request before anything is written; per item, the
    answer is its record, or its own error (its key taken with other arguments).
    The items' own ``batch`` is ignored: the request's applies to all.
    """

    items: tuple[Register, ...]
    batch: BatchLimit | None = None


@dataclass(frozen=True, slots=True)
class RetryUnit(Request[Registered]):
    """``retry(id)``: a new unit with a failed unit's spec (``supervisor.actor.rerun``)."""

    work_id: str


@dataclass(frozen=True, slots=True)
class SendInput(Request[bool]):
    """``send_input(id, data, eof)``: queue bytes for the unit's stdin (``actor.unit_input``)."""

    work_id: str
    data: bytes
    eof: bool = False


@dataclass(frozen=True, slots=True)
class SignalUnit(Request[bool]):
    """``signal(id, name, value)``: keep it for the unit and route it (``actor.signals``)."""

    work_id: str
    name: str
    value: Any


@dataclass(frozen=True, slots=True)
class AddSchedule(Request[None]):
    """``schedule(name, cron, ...)``: keep it in the ledger (``supervisor.actor.schedules``)."""

    name: str
    cron: str
    letter: str
    spec: Any
    tz: str
    catch_up: str
    options: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RemoveSchedule(Request[bool]):
    name: str


@dataclass(frozen=True, slots=True)
class ListSchedules(Request[list[ScheduleInfo]]):
    pass


@dataclass(frozen=True, slots=True)
class RegisterKind(Request[None]):
    letter: str
    actor_class: type[WorkActor]


@dataclass(frozen=True, slots=True)
class Recover(Request[dict[str, list[str]]]):
    """Open the session; resume, fail and adopt what the ledger holds."""


@dataclass(frozen=True, slots=True)
class Subscribe(Request[None]):
    """``subscriber(old, new)`` runs in the actor's thread after every write; it must not block."""

    subscriber: Subscriber


@dataclass(frozen=True, slots=True)
class SubscribeStops(Request[None]):
    """``subscriber(id)`` runs in the actor's thread when a unit a deploy handed over has
    stopped (no end is written for it, so no change is told); it must not block."""

    subscriber: Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SubscribeCheckpoints(Request[None]):
    """``subscriber(id, attempt, state)`` runs in the actor's thread after each checkpoint
    is saved; it must not block."""

    subscriber: CheckpointSubscriber


# -- reads -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Get(Request[WorkRecord]):
    work_id: str


@dataclass(frozen=True, slots=True)
class ListUnits(Request[list[WorkRecord]]):
    query: Query


@dataclass(frozen=True, slots=True)
class ReadOutput(Request[tuple[bytes, WorkRecord]]):
    work_id: str
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ReadChunk(Request[OutputChunk]):
    work_id: str
    offset: int
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ResidentIds(Request[set[str]]):
    pass


@dataclass(frozen=True, slots=True)
class MailboxOf(Request[Mailbox]):
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class UnitActor(Request[pykka.ActorRef[WorkActor]]):
    """The running unit's actor (for kinds' own control messages and tests)."""

    work_id: str


@dataclass(frozen=True, slots=True)
class Update(Request[WorkRecord]):
    """The one update function, from outside (tests)."""

    work_id: str
    change: Change


# -- retention, ending, time -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetainUnit(Request[WorkRecord]):
    """Hold the record in memory for a reader of this process (a stream); see Release."""

    work_id: str


@dataclass(frozen=True, slots=True)
class Release(Request[WorkRecord]):
    work_id: str


@dataclass(frozen=True, slots=True)
class TakeLease(Request[str]):
    """A retain lease for ``lease`` seconds, held by this process; its ID."""

    work_id: str
    lease: float


@dataclass(frozen=True, slots=True)
class RenewLease(Request[bool]):
    lease_id: str
    lease: float


@dataclass(frozen=True, slots=True)
class EndLease(Request[bool]):
    work_id: str
    lease_id: str


@dataclass(frozen=True, slots=True)
class KillUnit(Request[bool]):
    work_id: str
    reason: Reason = Reason.KILLED


@dataclass(frozen=True, slots=True)
class WithdrawPending(Request[list[bool]]):
    """End ``killed`` (reason ``cancelled``) those of the units that have not started:
    per unit, whether it was withdrawn. A running or ended unit is left alone -- a
    future's ``cancel`` of work already running is refused, as the stdlib's is."""

    work_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CancelUnit(Request[bool]):
    work_id: str
    grace: float
    reason: Reason = Reason.CANCELLED


@dataclass(frozen=True, slots=True)
class Shed(Request[list[str]]):
    n: int | None = None


@dataclass(frozen=True, slots=True)
class TickNow(Request[int]):
    """Run due deadlines and the sweep; how many records left memory."""


@dataclass(frozen=True, slots=True)
class Gc(Request[int]):
    older_than: float | None = None


# -- teammates ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendToTeammate(Request[int]):
    """A tell (``ask`` False) or an ask answered through ``reply``; the ask's token."""

    target: str
    message: bytes
    ask: bool
    reply: Route | None = None


@dataclass(frozen=True, slots=True)
class ForgetAsk(Request[None]):
    target: str
    token: int


@dataclass(frozen=True, slots=True)
class StopTeammateUnit(Request[bool]):
    work_id: str


# -- shutdown -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Drain(Request[list[str]]):
    """Admit no more work (submits refused, pending units left pending); the IDs of
    running units that cannot resume, which a deploy would end."""


@dataclass(frozen=True, slots=True)
class BeginShutdown(Request[list[str]]):
    """Refuse new work, kill running work; the IDs still ending. With ``deploy``, what
    can resume is asked to stop (as a cancel, within ``grace``) and handed over."""

    deploy: bool = False
    grace: float = 5.0


@dataclass(frozen=True, slots=True)
class ForceEnd(Request[None]):
    work_ids: tuple[str, ...]
    error: str
