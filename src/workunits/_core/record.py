"""Frozen snapshots of a unit's state, and the notice a parent gets when one ends.

Nothing mutates a record in place: changes are ``replace`` (``dataclasses.replace``'s
meaning, made faster here) inside the registry's single ``update`` function (DESIGN
invariant 5).
"""

from __future__ import annotations

import dataclasses
import inspect
import signal as _signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workunits._core.sandbox import Sandbox
from workunits._core.status import Reason, Status

if TYPE_CHECKING:
    from workunits._core.restart import Restart
    from workunits._core.retry import Attempt, Retry

TAIL_BYTES = 64 * 1024


def storable_text(text: str) -> str:
    """``text`` as every ledger and JSON keep it: a lone surrogate (an undecodable
    byte, as ``os.fsdecode`` gives it) as its backslash escape, a NUL as U+FFFD.

    For free text a unit reports (its error, a progress message): SQLite,
    PostgreSQL and orjson each refuse one or the other, and a refused write of a
    unit's end would never land.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True, slots=True)
class WorkRecord:
    """Frozen snapshot of one unit.

    ``output_offset`` is the read position of ``read_output``/``stream``;
    ``output_bytes`` and ``output_tail`` (the raw last 64 KiB) are filled by the
    terminal transition, when the output file itself is removed.

    ``durable`` is False while the ledger does not yet hold this record's
    status: its write failed (a full disk, an I/O error, a lock held too long)
    and the supervisor retries it every tick until it lands (invariant 14).
    Only ``get``/``list`` of a live supervisor show such a record; waits,
    results and notices hold back until the write lands.
    """

    id: str
    kind: str
    status: Status
    parent: str | None
    description: str
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    output_path: str | None = None
    output_offset: int = 0
    output_bytes: int = 0
    output_tail: bytes = b""
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    reason: Reason | None = None
    notified: bool = False  # its one notice was written (with the terminal transition)
    # A consumer acknowledged the notice, or nobody can (its parent ended): the
    # record may leave memory once its grace is over (invariant 8).
    acknowledged: bool = False
    retain: int = 0  # holds by this process's readers (a stream); viewers use leases
    evict_after: float | None = None
    attempt: int = 1
    # Its process's, once the zygote's report of the start is in: a unit's first
    # progress or answer, which takes another path, may come a moment before it.
    pid: int | None = None
    progress: float | None = None
    progress_message: str = ""
    result: bytes | None = None  # encoded value; opened only by whoever asks for it
    result_format: str | None = None  # "json" or "pickle"; None for kinds without values
    cause: bytes | None = None  # cloudpickled exception of a failed unit, when it pickled
    expired_at: float | None = None  # set once retention dropped its result, tail and checkpoint
    # When the last progress report arrived (the supervisor's clock), and the
    # structured evidence it carried (``ctx.progress(0.4, "x", done=3, total=8)``).
    progress_at: float | None = None
    evidence: Mapping[str, Any] | None = None
    retry: Retry | None = None  # the unit's retry policy
    restart: Restart | None = None  # a teammate's restart policy (None: temporary)
    # Earlier attempts and how each ended: failed and retried, lost with its supervisor
    # (reason ``lost``), or handed over at a deploy (reason ``handed-over``).
    attempts: tuple[Attempt, ...] = ()
    retry_at: float | None = None  # set while it waits between attempts (it stays running)
    retry_of: str | None = None  # the failed unit ``retry(id)`` started this one for
    stall_after: float | None = None  # quiet seconds before its parent gets a StallEvent
    durable: bool = True  # False while its status waits to be written (see above)
    not_before: float | None = None  # a pending unit starts no earlier (seconds since the epoch)
    # The sandbox policy it runs under (None: a unit recorded before policies were
    # kept), and what of it and of the default protection this machine did not enforce.
    sandbox: Sandbox | None = None
    unenforced: tuple[str, ...] = ()

    @property
    def shown_status(self) -> str:
        """``expired`` once retention ran out, else the status."""
        return "expired" if self.expired_at is not None else self.status.value

    def describe_end(self) -> str:
        """One line saying how the unit ended (or that it has not)."""
        parts: list[str] = []
        if self.reason is not None:
            parts.append(f"reason {self.reason.value}")
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.signal is not None:
            parts.append(f"killed by {signal_name(self.signal)}")
        if self.error:
            parts.append(self.error.strip().splitlines()[-1] if self.error.strip() else "")
        return ", ".join(p for p in parts if p) or self.status.value


@dataclass(frozen=True, slots=True)
class Notification:
    """The one message a parent gets when a child reaches a terminal status."""

    id: str
    kind: str
    status: Status
    exit_code: int | None
    signal: int | None
    error: str | None
    reason: Reason | None
    description: str
    output_tail: bytes
    ended_at: float
    # True when this notice was handed out before (to a consumer that died or
    # released it without acknowledging): act on it idempotently.
    redelivered: bool = False

    @classmethod
    def of(cls, record: WorkRecord) -> Notification:
        """The notice of a record at its terminal write."""
        assert record.ended_at is not None, "notifications are only made at the terminal write"
        return cls(
            id=record.id,
            kind=record.kind,
            status=record.status,
            exit_code=record.exit_code,
            signal=record.signal,
            error=record.error,
            reason=record.reason,
            description=record.description,
            output_tail=record.output_tail,
            ended_at=record.ended_at,
        )


@dataclass(frozen=True, slots=True)
class MonitorEvent:
    """A line a monitor matched: an *event* for its parent, not its terminal notice.

    A monitor sends any number of these, then exactly one ``Notification`` when it
    ends, always after its last event. ``suppressed`` counts the matching lines the
    rate limit dropped since the previous event.
    """

    id: str  # the monitor's ID
    line: str
    at: float  # when the monitor read the line (seconds since the epoch)
    suppressed: int = 0


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """Output read from a given offset (``read_output(id, offset=N)``).

    ``data`` starts at ``start``, which is past the offset asked for when those
    bytes are no longer held (an ended unit keeps only its tail): the reader
    missed ``start - offset`` bytes. Read on from ``next_offset``. ``ended``:
    the unit has ended and nothing is left after ``next_offset``.
    """

    data: bytes
    start: int
    next_offset: int
    ended: bool


@dataclass(frozen=True, slots=True)
class StallEvent:
    """A child went quiet: no progress, output or checkpoint for its ``stall_after``.

    An *event* for its parent, like a ``MonitorEvent``: not a status (the child
    stays ``running``) and not its notice (that still comes once, at its end).
    Sent once per quiet spell; a child that reports again and goes quiet again
    sends another.
    """

    id: str  # the quiet child's ID
    quiet_since: float  # its last progress, output, checkpoint or start
    at: float  # when the supervisor noticed (its clock)
    stall_after: float


MailboxItem = Notification | MonitorEvent | StallEvent
"""What a mailbox holds: terminal notices of children, monitors' events, stall events."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a unit's work ended, as its actor reports it to the supervisor."""

    status: Status
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    reason: Reason | None = None
    result: bytes | None = None
    result_format: str | None = None
    cause: bytes | None = None
    # The failed exception's classes, ``module:qualname``, most derived first
    # (what a retry policy's ``on`` is matched against); empty without one.
    error_types: tuple[str, ...] = ()
    # The unit's actor failed (a bug in its kind), not its work: this end stays
    # as reported even after a kill was accepted (``UnitControl.as_asked``).
    actor_failed: bool = False

    def __post_init__(self) -> None:
        # Every end passes here, whoever made it: its error is written to the ledger
        # and into notices, which must be able to hold it (``storable_text``).
        if self.error is not None:
            object.__setattr__(self, "error", storable_text(self.error))


def _fast_replace(obj: Any, /, **changes: Any) -> Any:
    """``dataclasses.replace`` at a third of its cost, for the records the supervisor
    copies several times per unit (``dataclasses.replace`` walks the fields' metadata
    on every call: 16 µs for a WorkRecord, 6 µs here)."""
    cls = type(obj)
    make = _REPLACERS.get(cls)
    if make is None:
        make = _REPLACERS[cls] = _replacer(cls)
    return make(obj, changes)


def _replacer(cls: type) -> Any:
    """A copy-with-changes function made for ``cls``: every field set from ``changes``
    or from the original, with no ``__init__`` to run. Classes whose ``__init__`` does
    more than set fields (``__post_init__``, ``init=False`` fields, ``InitVar``s) keep
    ``dataclasses.replace``."""
    fields = dataclasses.fields(cls)
    parameters = list(inspect.signature(cls).parameters)
    if hasattr(cls, "__post_init__") or parameters != [f.name for f in fields]:
        return lambda obj, changes: dataclasses.replace(obj, **changes)
    names = frozenset(f.name for f in fields)
    lines = [f"    set(new, {f.name!r}, take({f.name!r}, obj.{f.name}))" for f in fields]
    source = "\n".join(
        [
            "def replace(obj, changes):",
            "    if not changes.keys() <= names:",
            "        unknown = sorted(changes.keys() - names)",
            "        raise TypeError(f'{cls.__name__} has no field(s) {unknown}')",
            "    take = changes.get",
            "    new = new_object(cls)",
            *lines,
            "    return new",
        ]
    )
    scope = {"cls": cls, "names": names, "new_object": object.__new__, "set": object.__setattr__}
    exec(source, scope)  # noqa: S102 - built here from the class's own field names
    return scope["replace"]


_REPLACERS: dict[type, Any] = {}

if TYPE_CHECKING:
    # dataclasses' own, for mypy, which checks each call's field names and types; "as" is
    # the explicit re-export its strict mode asks for.
    from dataclasses import replace as replace  # noqa: PLC0414
else:
    replace = _fast_replace
