"""What a verb asks of its surface: one frozen operation per call, typed by its answer.

A verb (``verbs.Verbs``) checks its arguments and builds an ``Op[R]``; the
surface's transport carries it out -- an ask of the supervisor actor, a ledger
transaction, an HTTP request, a request on the unit's channel -- and answers
an ``R``. The same operation serves the blocking call and its ``_async`` twin,
as httpx builds one request for ``Client`` and ``AsyncClient``: only carrying
it out differs.

Plain data: the unit process builds them too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from workunits._core.query import Query
from workunits._core.record import OutputChunk, WorkRecord
from workunits._core.schedule import ScheduleInfo

if TYPE_CHECKING:
    from workunits._ledger import UnitRow
    from workunits._ledger.unreadable import Unreadable

R = TypeVar("R")


class Submitted(NamedTuple):
    """A submit's answer: the unit's ID, and False when its key named an existing unit."""

    id: str
    created: bool


@dataclass(frozen=True, slots=True)
class Op(Generic[R]):
    """An operation answered with an ``R``."""


@dataclass(frozen=True, slots=True)
class Get(Op[WorkRecord]):
    work_id: str


@dataclass(frozen=True, slots=True)
class List(Op[list[WorkRecord]]):
    """One page of units (``query.limit`` of them at most), checked by ``_core.query``."""

    query: Query


@dataclass(frozen=True, slots=True)
class Kill(Op[bool]):
    work_id: str


@dataclass(frozen=True, slots=True)
class Cancel(Op[bool]):
    work_id: str
    grace: float


@dataclass(frozen=True, slots=True)
class Retry(Op[Submitted]):
    work_id: str


@dataclass(frozen=True, slots=True)
class Signal(Op[bool]):
    work_id: str
    name: str
    value: Any


@dataclass(frozen=True, slots=True)
class SendInput(Op[bool]):
    """Bytes for the stdin of a unit started with ``stdin=True`` (then its end, with ``eof``)."""

    work_id: str
    data: bytes
    eof: bool


@dataclass(frozen=True, slots=True)
class ReadOutput(Op[bytes]):
    """The output since the reader's last read (the unit's offset, or the client's own)."""

    work_id: str
    max_bytes: int | None


@dataclass(frozen=True, slots=True)
class ReadChunk(Op[OutputChunk]):
    work_id: str
    offset: int
    max_bytes: int | None


@dataclass(frozen=True, slots=True)
class Lease(Op[str]):
    """A retain lease on the unit: answered with the lease's ID."""

    work_id: str
    lease: float


@dataclass(frozen=True, slots=True)
class RenewLease(Op[bool]):
    work_id: str
    lease_id: str
    lease: float


@dataclass(frozen=True, slots=True)
class EndLease(Op[bool]):
    work_id: str
    lease_id: str


@dataclass(frozen=True, slots=True)
class AddSchedule(Op[None]):
    name: str
    cron: str
    letter: str
    spec: Any
    tz: str
    catch_up: str
    options: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RemoveSchedule(Op[bool]):
    name: str


@dataclass(frozen=True, slots=True)
class ListSchedules(Op[list[ScheduleInfo]]):
    pass


@dataclass(frozen=True, slots=True)
class Tell(Op[None]):
    """A message for a running teammate's ``on_receive``, without waiting for an answer."""

    work_id: str
    message: Any


@dataclass(frozen=True, slots=True)
class Stop(Op[bool]):
    work_id: str


@dataclass(frozen=True, slots=True)
class Shed(Op[list[str]]):
    n: int | None


@dataclass(frozen=True, slots=True)
class Gc(Op[int]):
    older_than: float | None


@dataclass(frozen=True, slots=True)
class RegisterKind(Op[None]):
    letter: str
    actor_class: type[Any]


# The ledger's rows: a type the unit process never loads (``Op`` alone at run time).
if TYPE_CHECKING:
    _RowOp = Op[UnitRow]
    _RowsOp = Op[list[UnitRow]]
else:
    _RowOp = _RowsOp = Op


@dataclass(frozen=True, slots=True)
class Row(_RowOp):
    """The ledger's full row of a unit (the ledger client's own)."""

    work_id: str


@dataclass(frozen=True, slots=True)
class Rows(_RowsOp):
    status: str | None
    kind: str | None
    parent: str | None
    limit: int | None
    ended_after: float | None
    on_unreadable: Callable[[Unreadable], None] | None
