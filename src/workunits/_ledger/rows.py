"""Ledger rows as typed values, and their conversions to and from ``WorkRecord``.

A ``WorkRecord`` is the in-memory snapshot the supervisor's registry holds; a
``UnitRow`` is what the ledger keeps, which is more: the idempotency key, the
spec, attempts, progress, checkpoint, result, session, retention. Reading a
row checks every column it decodes, so a row changed outside workunits
raises ``LedgerCorrupt`` naming the unit and the column, never a bare
``KeyError`` or ``ValueError`` from deep inside.
"""

from __future__ import annotations

import base64
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from workunits._core import ids, query
from workunits._core.errors import REPAIR, LedgerCorrupt
from workunits._core.record import Notification, WorkRecord
from workunits._core.restart import Restart, policy_from_json
from workunits._core.retry import Attempt, Retry, attempts_from_json
from workunits._core.sandbox import Sandbox
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger.backend import Row
from workunits._ledger.values import Stored
from workunits._util import strictjson

# How a unit whose retention ran out shows its status (its terminal status is kept).
EXPIRED = query.EXPIRED

# Columns a WorkRecord mirrors, written from it on every transition. Its
# result and cause are written too, signed, once they are set (see writes.py);
# its other fields (output_offset, notified, retain, evict_after) describe one
# process's memory; an evicted record's read offset is saved by name.
RECORD_COLUMNS = (
    "status",
    "started_at",
    "ended_at",
    "output_path",
    "output_bytes",
    "output_tail",
    "exit_code",
    "signal",
    "error",
    "reason",
    "pid",
    "progress",
    "progress_message",
    "progress_at",
    "progress_evidence",
)

# Columns ``Attempts.write`` may set by name, besides the record's own.
EXTRA_COLUMNS = (
    "output_offset",
    "cancel_requested",
    "session",
    "expire_at",
    "max_attempts",
    "resumable",
    "retry_at",
    "attempts_log",
    "trace_context",
)

# Terminal statuses as SQL sees them, derived from is_terminal (the one place
# that knows): ``status IN {IN_TERMINAL}`` with ``*TERMINAL`` as parameters.
TERMINAL = tuple(s.value for s in Status if is_terminal(s))
IN_TERMINAL = f"({', '.join('?' * len(TERMINAL))})"

# The columns a listed row reads (``UnitRow.from_sql(row, listed=True)``): every
# one its record holds -- a listed record is the one ``get`` gives -- and none of
# what only the ledger's own readers need: the spec (the callable and its
# arguments), the checkpoint, the trace context.
LISTED_COLUMNS = (
    "id",
    "kind",
    "status",
    "parent",
    "description",
    "key",
    "spec_hash",
    "attempt",
    "max_attempts",
    "resumable",
    "created_at",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "error",
    "reason",
    "output_path",
    "output_bytes",
    "output_tail",
    "progress",
    "progress_message",
    "result",
    "result_format",
    "result_mac",
    "result_versions",
    "result_file",
    "cause",
    "cause_format",
    "cause_mac",
    "cause_versions",
    "cancel_requested",
    "retain",
    "output_offset",
    "session",
    "pid",
    "expire_at",
    "expired_at",
    "progress_at",
    "progress_evidence",
    "retry_policy",
    "retry_at",
    "attempts_log",
    "retry_of",
    "stall_after",
    "not_before",
    "sandbox",
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NewUnit:
    """What a submit inserts: a ``pending`` unit whose ID the caller minted.

    With ``started_at``, a unit its supervisor starts at once is inserted
    ``running``: one fully synced commit instead of a submit and a transition.
    """

    id: str
    kind: str
    spec: Stored
    created_at: float
    parent: str | None = None
    description: str = ""
    key: str | None = None
    max_attempts: int = 1
    resumable: bool = False
    session: str | None = None
    output_path: str | None = None
    started_at: float | None = None
    retry: Retry | None = None
    retry_of: str | None = None  # the failed unit retry(id) starts this one for
    stall_after: float | None = None
    restart: Restart | None = None  # a teammate's; kept in retry_policy, beside a Retry
    not_before: float | None = None  # pending until then
    sandbox: Sandbox | None = None
    unenforced: tuple[str, ...] = ()

    @property
    def sandbox_json(self) -> str | None:
        """The ``sandbox`` column: the policy and what of it was not enforced."""
        return sandbox_to_json(self.sandbox, self.unenforced)

    @property
    def policy_json(self) -> str | None:
        """The ``retry_policy`` column: the retry or restart policy (a unit has one at most)."""
        policy = self.retry if self.retry is not None else self.restart
        return None if policy is None else policy.to_json().decode()

    @property
    def status(self) -> Status:
        return Status.PENDING if self.started_at is None else Status.RUNNING

    @classmethod
    def of(
        cls,
        record: WorkRecord,
        spec: Stored,
        *,
        key: str | None = None,
        max_attempts: int = 1,
        resumable: bool = False,
        session: str | None = None,
        started_at: float | None = None,
    ) -> NewUnit:
        """The row for a freshly registered record (``running`` with ``started_at``)."""
        return cls(
            id=record.id,
            kind=record.kind,
            spec=spec,
            created_at=record.created_at,
            parent=record.parent,
            description=record.description,
            key=key,
            max_attempts=max_attempts,
            resumable=resumable,
            session=session,
            output_path=record.output_path,
            started_at=started_at,
            retry=record.retry,
            retry_of=record.retry_of,
            stall_after=record.stall_after,
            restart=record.restart,
            not_before=record.not_before,
            sandbox=record.sandbox,
            unenforced=record.unenforced,
        )


def sandbox_to_json(sandbox: Sandbox | None, unenforced: tuple[str, ...]) -> str | None:
    if sandbox is None:
        return None
    body = {"policy": sandbox.to_json(), "unenforced": list(unenforced)}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()


def sandbox_from_json(data: Any) -> tuple[Sandbox, tuple[str, ...]]:
    """The ``sandbox`` column's policy and notes (ValueError if it is not one)."""
    if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
        raise TypeError("not a sandbox")
    notes = data.get("unenforced", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise TypeError("not a list of notes")
    return Sandbox.from_json(data["policy"]), tuple(notes)


@dataclass(frozen=True, slots=True)
class UnitRow:
    """One row of ``units``, decoded. Blobs the caller may not need stay raw."""

    id: str
    kind: str
    status: Status
    parent: str | None
    description: str
    key: str | None
    spec_hash: str
    spec: Stored | None  # None once expired
    attempt: int
    max_attempts: int
    resumable: bool
    created_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    error: str | None
    reason: Reason | None
    output_path: str | None
    output_bytes: int
    output_tail: bytes
    progress: float | None
    progress_message: str | None
    checkpoint: bytes | None  # raw JSON; see last_checkpoint()
    result: Stored | None
    cause: Stored | None  # a failed unit's pickled exception
    cancel_requested: bool
    retain: int  # unused since schema 2: retains are leases (table retains)
    session: str | None
    pid: int | None
    expire_at: float | None
    expired_at: float | None
    # Where read_output stopped when the record left its supervisor's memory.
    output_offset: int = 0
    # The value store reference of a large checkpoint (``checkpoint`` is then
    # empty until the Ledger loads it).
    checkpoint_file: str | None = None
    checkpoint_mac: bytes | None = None  # None: written before checkpoints were signed
    progress_at: float | None = None
    evidence: dict[str, Any] | None = None
    retry: Retry | None = None
    retry_at: float | None = None  # while it waits between attempts
    attempts: tuple[Attempt, ...] = ()
    retry_of: str | None = None
    stall_after: float | None = None
    restart: Restart | None = None
    not_before: float | None = None
    trace_context: str | None = None  # its span's traceparent (supervisor.tracing)
    sandbox: Sandbox | None = None
    unenforced: tuple[str, ...] = ()
    # Read for a list (``LISTED_COLUMNS``): the spec, checkpoint and trace context
    # were not read, and read as None here; its record is the one ``get`` gives.
    listed: bool = False

    @property
    def expired(self) -> bool:
        return self.expired_at is not None

    @property
    def shown_status(self) -> str:
        """``expired`` once retention ran out, else the status."""
        return EXPIRED if self.expired else self.status.value

    def last_checkpoint(self) -> Any:
        """The last saved checkpoint, decoded (None when there is none)."""
        if self.checkpoint is None:
            return None
        return strictjson.loads(self.checkpoint, self.id, "checkpoint")

    def to_record(self, *, acknowledged: bool = False) -> WorkRecord:
        """The in-memory record this row stands for, as a supervisor would hold it.

        A terminal row's notice is in the outbox (written with the transition),
        so ``notified`` is true exactly when the status is terminal; whether it
        was ``acknowledged`` is the outbox's to say (``Units.records``). The memory-only
        fields (``evict_after``, ``retain``) start afresh; ``output_offset`` is
        where the record's reader stopped when it left memory. A pickled result
        or cause is handed on as bytes: rows the Ledger reads have had their
        signatures checked (``Ledger`` verifies them on every read).
        """
        return WorkRecord(
            id=self.id,
            kind=self.kind,
            status=self.status,
            parent=self.parent,
            description=self.description,
            created_at=self.created_at,
            started_at=self.started_at,
            ended_at=self.ended_at,
            output_path=self.output_path,
            output_bytes=self.output_bytes,
            output_tail=self.output_tail,
            exit_code=self.exit_code,
            signal=self.signal,
            error=self.error,
            reason=self.reason,
            notified=is_terminal(self.status),
            acknowledged=acknowledged,
            output_offset=self.output_offset,
            attempt=self.attempt,
            pid=self.pid,
            progress=self.progress,
            progress_message=self.progress_message or "",
            result=None if self.result is None else self.result.data,
            result_format=None if self.result is None else self.result.format,
            cause=None if self.cause is None else self.cause.data,
            expired_at=self.expired_at,
            progress_at=self.progress_at,
            evidence=self.evidence,
            retry=self.retry,
            restart=self.restart,
            attempts=self.attempts,
            retry_at=self.retry_at,
            retry_of=self.retry_of,
            stall_after=self.stall_after,
            not_before=self.not_before,
            sandbox=self.sandbox,
            unenforced=self.unenforced,
        )

    @classmethod
    def fresh(cls, new: NewUnit, spec_hash: str) -> UnitRow:
        """The row a submit of ``new`` inserts, without reading it back."""
        return cls(
            id=new.id,
            kind=new.kind,
            status=new.status,
            parent=new.parent,
            description=new.description,
            key=new.key,
            spec_hash=spec_hash,
            spec=new.spec,
            attempt=1,
            max_attempts=new.max_attempts,
            resumable=new.resumable,
            created_at=new.created_at,
            started_at=new.started_at,
            ended_at=None,
            exit_code=None,
            signal=None,
            error=None,
            reason=None,
            output_path=new.output_path,
            output_bytes=0,
            output_tail=b"",
            progress=None,
            progress_message=None,
            checkpoint=None,
            result=None,
            cause=None,
            cancel_requested=False,
            retain=0,
            session=new.session,
            pid=None,
            expire_at=None,
            expired_at=None,
            retry=new.retry,
            retry_of=new.retry_of,
            stall_after=new.stall_after,
            restart=new.restart,
            not_before=new.not_before,
            sandbox=new.sandbox,
            unenforced=new.unenforced,
        )

    @classmethod
    def from_sql(cls, row: Row, *, listed: bool = False) -> UnitRow:
        """The row decoded; ``listed``: a row of ``LISTED_COLUMNS`` only (see there), whose
        spec, checkpoint and trace context were not read and read as None."""
        c = _Columns(row, LISTED_COLUMNS if listed else None)
        work_id = c.id
        policy = c.parsed("retry_policy", policy_from_json)
        sandbox = c.parsed("sandbox", _sandbox_column)
        return cls(
            id=work_id,
            kind=c.req("kind", str),
            status=c.req("status", Status),
            parent=c.opt("parent", _work_id),
            description=c.req("description", str),
            key=c.opt("key", str),
            spec_hash=c.req("spec_hash", str),
            spec=None if listed else c.stored("spec"),
            attempt=c.req("attempt", int),
            max_attempts=c.req("max_attempts", int),
            resumable=c.req("resumable", bool),
            created_at=c.req("created_at", float),
            started_at=c.opt("started_at", float),
            ended_at=c.opt("ended_at", float),
            exit_code=c.opt("exit_code", int),
            signal=c.opt("signal", int),
            error=c.opt("error", str),
            reason=c.opt("reason", Reason),
            output_path=c.opt("output_path", str),
            output_bytes=c.req("output_bytes", int),
            output_tail=c.opt("output_tail", bytes) or b"",
            progress=c.opt("progress", float),
            progress_message=c.opt("progress_message", str),
            checkpoint=None if listed else c.opt("checkpoint", bytes),
            result=c.stored("result"),
            cause=c.stored("cause"),
            cancel_requested=c.req("cancel_requested", bool),
            retain=c.req("retain", int),
            output_offset=c.req("output_offset", int),
            session=c.opt("session", str),
            pid=c.opt("pid", int),
            expire_at=c.opt("expire_at", float),
            expired_at=c.opt("expired_at", float),
            checkpoint_file=None if listed else c.opt("checkpoint_file", str),
            checkpoint_mac=None if listed else c.opt("checkpoint_mac", bytes),
            progress_at=c.opt("progress_at", float),
            evidence=c.json("progress_evidence"),
            retry=policy if isinstance(policy, Retry) else None,
            restart=policy if isinstance(policy, Restart) else None,
            retry_at=c.opt("retry_at", float),
            attempts=c.parsed("attempts_log", attempts_from_json) or (),
            retry_of=c.opt("retry_of", str),
            stall_after=c.opt("stall_after", float),
            not_before=c.opt("not_before", float),
            trace_context=None if listed else c.opt("trace_context", str),
            sandbox=None if sandbox is None else sandbox[0],
            unenforced=() if sandbox is None else sandbox[1],
            listed=listed,
        )


def _sandbox_column(text: str) -> tuple[Sandbox, tuple[str, ...]]:
    return sandbox_from_json(orjson.loads(text))


def _work_id(value: str) -> str:
    """A column that names a unit (``parent``): a well-formed ID (ValueError otherwise)."""
    return ids.validate(value)


class _Columns:
    """Typed access to one row's columns; every failure names the unit and the column."""

    def __init__(self, row: Row, names: Sequence[str] | None = None) -> None:
        """``names``: the row's columns in order, when the caller selected them."""
        # By name once, into a dict: ``sqlite3.Row`` finds a name by comparing it
        # with each column's in turn, which for some 50 lookups of a 56-column row
        # cost more than all the rest of its decoding.
        self._row = dict(zip(row.keys() if names is None else names, row, strict=True))
        work_id = self._row["id"]
        if not (isinstance(work_id, str) and ids.is_valid(work_id)):
            raise LedgerCorrupt(f"a units row has id {work_id!r:.60}, which is not an ID{REPAIR}")
        self.id: str = work_id
        self._id = work_id

    def opt(self, name: str, conv: Callable[[Any], T]) -> T | None:
        value = self._row[name]
        if value is None:
            return None
        return self._convert(name, value, conv)

    def req(self, name: str, conv: Callable[[Any], T]) -> T:
        value = self._row[name]
        if value is None:
            raise LedgerCorrupt(f"unit {self._id}: column {name} is NULL{REPAIR}")
        return self._convert(name, value, conv)

    def json(self, name: str) -> Any:
        data = self.opt(name, str)
        return None if data is None else strictjson.loads(data.encode(), self._id, name)

    def parsed(self, name: str, parse: Callable[[str], T]) -> T | None:
        """A JSON column parsed into its type; LedgerCorrupt naming it when it does not parse."""
        data = self.opt(name, str)
        if data is None:
            return None
        try:
            return parse(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise LedgerCorrupt(
                f"unit {self._id}: column {name} does not parse ({exc!r:.80}){REPAIR}"
            ) from None

    def stored(self, name: str) -> Stored | None:
        data = self.opt(name, bytes)
        if data is None:
            return None
        fmt = self.req(f"{name}_format", str)
        mac, versions = self.opt(f"{name}_mac", bytes), self.opt(f"{name}_versions", str)
        file = self.opt(f"{name}_file", str) if name != "cause" else None  # causes stay inline
        return Stored(fmt, data, mac, versions, file)

    def _convert(self, name: str, value: Any, conv: Callable[[Any], T]) -> T:
        # SQLite's flexible typing lets an outside writer put any type anywhere:
        # accept only the storage class each column is meant to have.
        expected = _STORAGE.get(conv)
        if expected is not None and not isinstance(value, expected):
            raise LedgerCorrupt(
                f"unit {self._id}: column {name} holds {type(value).__name__} {value!r:.60}, "
                f"not {getattr(expected, '__name__', expected)}{REPAIR}"
            )
        try:
            return conv(value)
        except ValueError:
            raise LedgerCorrupt(
                f"unit {self._id}: column {name} holds {value!r:.60}, which is not a "
                f"known {_CONVERTED.get(conv) or getattr(conv, '__name__', 'value')}{REPAIR}"
            ) from None


_CONVERTED: Mapping[object, str] = {_work_id: "work unit ID"}

_STORAGE: Mapping[object, type | types.UnionType] = {
    str: str,
    int: int,
    bool: int,
    float: float | int,
    bytes: bytes,
    Status: str,
    Reason: str,
}


# -- notifications ----------------------------------------------------------------


def encode_notification(notice: Notification) -> bytes:
    return orjson.dumps(
        {
            "id": notice.id,
            "kind": notice.kind,
            "status": notice.status.value,
            "exit_code": notice.exit_code,
            "signal": notice.signal,
            "error": notice.error,
            "reason": None if notice.reason is None else notice.reason.value,
            "description": notice.description,
            "output_tail": base64.b64encode(notice.output_tail).decode("ascii"),
            "ended_at": notice.ended_at,
        }
    )


def decode_notification(payload: bytes, work_id: str) -> Notification:
    doc = strictjson.loads(payload, work_id, "notifications.payload")
    try:
        return Notification(
            id=doc["id"],
            kind=doc["kind"],
            status=Status(doc["status"]),
            exit_code=doc["exit_code"],
            signal=doc["signal"],
            error=doc["error"],
            reason=None if doc["reason"] is None else Reason(doc["reason"]),
            description=doc["description"],
            output_tail=base64.b64decode(doc["output_tail"], validate=True),
            ended_at=doc["ended_at"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LedgerCorrupt(
            f"unit {work_id}: column notifications.payload is not a notification ({exc!r})"
        ) from None
