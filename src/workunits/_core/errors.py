"""The one tree of workunits errors.

WorkunitsError
├── InvalidWorkId        malformed ID (also a ValueError)
├── UnknownKind          well-formed ID or kind letter nobody registered (also a LookupError)
├── KindTaken            register_kind() with a letter in use or reserved (also a ValueError)
├── KindFault            a kind's code raised what is not an Exception (SystemExit,
│                        KeyboardInterrupt, a cancel); contained, it fails that unit only
├── UnknownWork          an ID this supervisor never saw, or has forgotten (also a KeyError)
│   └── WorkExpired      the ledger knows the unit, but its retention ran out: no result
├── InvalidArgument      a call was given a value it cannot take (also a ValueError)
│   ├── SpecError        arguments a submit cannot accept
│   │   └── SandboxEscalation  a child asked for more than its parent's sandbox allows
│   └── SandboxUnavailable  a protection this machine cannot enforce was required (a
│                        submit's sandbox, or ``isolation="required"``); names what is missing
├── WrongType            a value of a type the call cannot take, from the caller or from
│                        a callable it handed over (also a TypeError)
├── NoSuchMethod         a teammate proxy called a private name (also an AttributeError)
├── NoCurrentUnit        wu.current() outside a unit's process (also a RuntimeError)
├── InvalidTransition    a status change the lifecycle table forbids (a bug, not a race)
├── NotFinished          wait/result timed out while the unit still runs (also a TimeoutError)
├── WorkFailed           the unit ended ``failed``; carries the record and its cause
├── WorkKilled           the unit ended ``killed``; carries the record and its reason
├── IdempotencyConflict  the same key was submitted with different arguments
├── BatchItemsFailed     items of a batch submit failed on their own; the rest run
├── NotRetryable         retry(id) of a unit that did not end failed/killed, or whose
│                        spec is no longer kept
├── StaleAttempt         a write from an attempt that is no longer the unit's current one
├── UnstorableValue      a checkpoint or result that would not come back equal (also a ValueError)
├── UnloadableValue      a stored result that cannot be loaded in this process: its class
│                        does not import, or rebuilding it raises
├── SupervisorBusy       another supervisor holds the state dir's lock
├── SupervisorClosed     the supervisor was closed, or its actor is gone or did not answer
│                        within ask_timeout
├── ClientClosed         a ledger client was closed (also ends its waits in other threads)
├── ServerUnreachable    an HTTP client could not reach its server, or lost it mid-answer
│                        (also a ConnectionError)
├── MailboxClosed        the mailbox's supervisor (or unit) is gone and no notice is left
├── NoNotification       no notice arrived within the timeout (also a TimeoutError)
├── TeammateEnded        a tell/ask to a teammate that has ended or is ending, or an ask
│   │                    whose teammate ended before it answered
│   └── TeammateRestarted  an ask whose teammate's attempt ended and was restarted
│                          (``restart=``) before it answered: ask again
├── AskTimeout           no answer to an ask within its timeout (also a TimeoutError)
├── SignalTimeout        ctx.wait_for(name) saw no such signal within its timeout
│                        (also a TimeoutError)
├── TeammateError        a teammate's handler raised an exception that cannot be
│                        rebuilt here; carries its type, message and traceback
├── NotRunning           (workunits.testing) a scripted unit that has ended takes no
│                        more commands
└── LedgerError          the durable ledger cannot do what was asked
    ├── NoLedger            the state dir has no ledger, and the caller asked not to create one
    ├── StateDirError       the state dir is unsafe (a symlink, not ours, writable by others),
    │                       not a directory, unreadable, or read-only for a writer
    ├── SecretFileError     the shared secret file is unsafe (readable by others),
    │                       unreadable or too short
    ├── LedgerVersionError  the ledger file was written by a newer schema
    ├── LedgerCorrupt       a file or row holds what the ledger cannot read
    ├── LedgerFull          the state dir's disk is full; nothing was written
    ├── LedgerTampered      a durable value failed its integrity check
    │   └── LedgerGone      the ledger file (or its key) was deleted, replaced or moved
    │                       while the supervisor ran: it takes no new work
    ├── SessionLost         this supervisor's session lease lapsed and another took it over
    ├── CommitUnknown       the connection was lost as a write committed, and reading back
    │                       could not reach the ledger in time: look the ID up
    └── ValueVersionMismatch  a pickled value was written by other Python/package versions

Cancelled (BaseException)  raised inside a unit at a requested cancel; ``except
                           Exception`` in user code cannot swallow it.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from workunits._core.record import WorkRecord


class WorkunitsError(Exception):
    """Root of every error workunits raises on purpose.

    Every one pickles and comes back as itself, whatever its ``__init__`` takes:
    a unit's process gets the supervisor's error over its channel, and catches
    it by its class.
    """

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(
    cls: type[WorkunitsError], args: tuple[object, ...], state: dict[str, object]
) -> WorkunitsError:
    """An error back from its pickle: its class, args and attributes, ``__init__`` not run."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InvalidWorkId(WorkunitsError, ValueError):
    """A string that is not a well-formed work unit ID."""


class UnknownKind(WorkunitsError, LookupError):
    """A kind letter (or the prefix of a well-formed ID) that no kind is registered for."""


class KindTaken(WorkunitsError, ValueError):
    """``register_kind`` was given a letter that is reserved or already in use."""


class KindFault(WorkunitsError):
    """A kind's code raised what is not an ``Exception`` (``sys.exit``, a cancel...).

    Raised from it, in its place, where the supervisor called the kind
    (``actors.kind_code``): uncontained, it would stop every actor of the
    supervisor. It fails the unit (or the submit) it was called for, as any
    other error of the kind's would; the message names the kind and its hook.
    """


class UnknownWork(WorkunitsError, KeyError):
    """A well-formed ID this supervisor does not know (never registered, or evicted)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown work unit"


class WorkExpired(UnknownWork):
    """The unit ended long enough ago that its retention ran out (its status reads ``expired``).

    The ledger still says how it ended (``record``), but no longer keeps its
    result, output tail or checkpoint. A subclass of UnknownWork because, like
    an unknown unit, it has nothing more to give; never raised for a unit the
    ledger does not know.
    """

    def __init__(self, record: WorkRecord) -> None:
        end = record.describe_end()
        how = record.status.value if end == record.status.value else f"{record.status} ({end})"
        super().__init__(
            f"{record.id} has expired: it ended {how}, and its result and output are no longer kept"
        )
        self.record = record


class InvalidArgument(WorkunitsError, ValueError):
    """A call was given a value it cannot take; the message says which and why."""


class SpecError(InvalidArgument):
    """The arguments of a submit cannot make a unit; nothing was registered."""


class SandboxEscalation(SpecError):
    """A unit asked for a child whose sandbox is wider than its own (more paths, network,
    resources, or none at all): children inherit their parent's policy and may only
    narrow it. Nothing was registered."""


class SandboxUnavailable(InvalidArgument):
    """A protection this machine cannot enforce was required.

    At submit: the unit's sandbox asks for it (give ``required=False`` to run
    without it; the record then says what was not enforced). At start:
    ``Supervisor(isolation="required")`` on a machine without every default
    protection. The message names what is missing; ``workunits doctor`` lists all.
    """


class WrongType(WorkunitsError, TypeError):
    """A value of a type the call cannot take.

    From the caller (``data`` that is not bytes) or from a callable it handed
    over (a monitor's source that yields neither str nor bytes, a teammate class
    with no ``on_receive`` sent a plain message).
    """


class NoSuchMethod(WorkunitsError, AttributeError):
    """A teammate proxy named a private (underscored) method; only public ones are called."""


class NoCurrentUnit(WorkunitsError, RuntimeError):
    """``wu.current()`` was called outside a work unit's process."""


class InvalidTransition(WorkunitsError):
    """A status change the lifecycle table does not allow."""


class SupervisorClosed(WorkunitsError):
    """The supervisor is closed (or its actor died); it accepts no more calls.

    Also raised when its actor did not answer within ``ask_timeout``: then it
    is busy, not closed, the message says so, and the call may still take effect.
    """


class ClientClosed(WorkunitsError):
    """The ledger client (``wu.connect``) is closed; a wait in progress ends with this."""


class ServerUnreachable(WorkunitsError, ConnectionError):
    """An HTTP client could not reach its ``workunits serve --http``, or the connection
    dropped before the answer: the call may or may not have taken effect there (a
    submit with a key can be sent again to find out)."""


class MailboxClosed(WorkunitsError):
    """The mailbox is empty and will stay so: its supervisor (or its unit) is gone.

    Iterating a mailbox ends quietly at this point; ``get`` raises it.
    """


class NoNotification(WorkunitsError, TimeoutError):
    """No notice arrived within the timeout of a mailbox's ``get``."""


class NotFinished(WorkunitsError, TimeoutError):
    """The unit was still not terminal when the timeout elapsed."""

    def __init__(self, record: WorkRecord, timeout: float | None) -> None:
        if record.durable:
            message = f"{record.id} is still {record.status.value} after {timeout} s"
        else:
            message = (
                f"{record.id} ended {record.status.value}, but after {timeout} s its end is "
                f"still not written to the ledger (a failing disk? see the supervisor's log); "
                f"it is retried until it lands"
            )
        super().__init__(message)
        self.record = record


class WorkFailed(WorkunitsError):
    """The unit ended ``failed``. ``record`` says why (exit code, signal or error)."""

    def __init__(self, record: WorkRecord) -> None:
        super().__init__(f"{record.id} failed: {record.describe_end()}")
        self.record = record


class WorkKilled(WorkunitsError):
    """The unit ended ``killed``; ``record.reason`` says by whom or why."""

    def __init__(self, record: WorkRecord) -> None:
        super().__init__(f"{record.id} was killed: {record.describe_end()}")
        self.record = record


class IdempotencyConflict(WorkunitsError):
    """A submit reused an idempotency key with different arguments."""


class BatchItemsFailed(WorkunitsError):
    """Some items of a batch submit failed on their own (a key taken with other arguments);
    the others were submitted and run.

    ``results`` has one entry per item, in order: its handle, or its error.
    """

    def __init__(self, results: list[Any]) -> None:
        errors = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        first = "; ".join(f"item {i}: {e}" for i, e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(
            f"{len(errors)} of {len(results)} items of the batch failed: {first}{more}; "
            f"the others were submitted (their handles are in .results)"
        )
        self.results = results

    @property
    def errors(self) -> dict[int, BaseException]:
        """The failed items' errors, by index."""
        return {i: r for i, r in enumerate(self.results) if isinstance(r, BaseException)}


class NotRetryable(WorkunitsError):
    """``retry(id)`` of a unit that cannot be started again: it did not end failed or
    killed, or its spec is no longer kept."""


class StaleAttempt(WorkunitsError):
    """A progress, checkpoint or result write from an attempt that is no longer current.

    Fencing (DESIGN invariant 13): once a unit was resumed as attempt N+1,
    nothing attempt N still says may land in the ledger.
    """

    def __init__(self, work_id: str, attempt: int, current: int) -> None:
        super().__init__(
            f"{work_id}: write from attempt {attempt} refused, the current attempt is {current}"
        )
        self.work_id = work_id
        self.attempt = attempt
        self.current = current


class UnstorableValue(WorkunitsError, ValueError):
    """A checkpoint or result that JSON would not bring back equal; nothing was stored."""


class SupervisorBusy(WorkunitsError):
    """Another supervisor holds the state dir; ``pid`` is the holder's, when it is known."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class UnloadableValue(WorkunitsError):
    """A stored value (a pickled result) cannot be loaded in this process.

    It names a class or function this process cannot import, or rebuilding it
    ran its code (a ``__reduce__`` callable, ``__setstate__``) and that raised;
    the original error is the ``__cause__``. ``name`` is what could not be
    loaded (``module.qualname``): the missing class, or the function whose
    rebuild raised (``pickle`` when the bytes themselves do not load). The
    value itself is intact: load it where that code imports and runs.
    """

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name

    def __reduce__(self) -> tuple[type[UnloadableValue], tuple[str, str]]:
        return (type(self), (str(self), self.name))


class LedgerError(WorkunitsError):
    """The durable ledger cannot do what was asked."""


class NoLedger(LedgerError):
    """The state dir holds no ledger, and the caller asked not to create one."""


class StateDirError(LedgerError):
    """The state dir cannot be used: the message names the path and the reason.

    Unsafe ones are refused rather than repaired: a symlink as the final path
    component, a directory of another user, or one that group or others may
    write in. Also a file where the directory should be, a directory this user
    cannot read, and a read-only one given to a writer (a supervisor, a submit).
    """


class SessionLost(LedgerError):
    """This supervisor's session was taken over: its lease lapsed (it stopped renewing).

    Another supervisor on the same ledger now owns its units (resumed as their
    next attempt, or ended ``lost``), so every write of this session is refused
    (fencing, invariant 13). Retrying never helps: the session is over.
    """


class CommitUnknown(LedgerError):
    """A write's COMMIT lost its answer (the connection dropped: a crash, a failover, a
    network cut), and reading the row back could not reach the ledger within its deadline.

    The write may have landed or not. ``work_id`` (when the write was about one
    unit, as a submit is) names what to look up: a later ``get(work_id)`` tells,
    and a resubmit with the same idempotency key returns the unit if it exists.
    Never raised while the answer can still be read back: a submit returns its
    unit, or raises with nothing written.
    """

    def __init__(self, message: str, work_id: str | None = None) -> None:
        super().__init__(message)
        self.work_id = work_id

    def __reduce__(self) -> tuple[type[CommitUnknown], tuple[str, str | None]]:
        return (type(self), (str(self), self.work_id))


class LedgerVersionError(LedgerError):
    """The ledger file was written by a newer schema than this workunits understands."""


class LedgerCorrupt(LedgerError):
    """A ledger file, or one column of one row, holds what the ledger cannot read."""


# What to do about a units row that does not decode: the end of every LedgerCorrupt
# message about one (either ledger), wherever it is raised.
REPAIR = (
    "; the row was changed outside workunits: restore the ledger from a backup "
    "(`workunits backup` makes one of an embedded ledger; a PostgreSQL ledger, the "
    "database's own), or delete that unit's row"
)


class LedgerFull(LedgerError):
    """The disk holding the state dir is full; the transaction was rolled back."""


class SecretFileError(LedgerError):
    """The shared secret file (``--secret-file``, ``WORKUNITS_SECRET_FILE``) cannot be used.

    The message names the file and what to do; nothing was read from it.
    """


class LedgerTampered(LedgerError):
    """A durable value failed its integrity check and was not used."""


class LedgerGone(LedgerTampered):
    """The ledger file, its write-ahead log or its key was deleted, replaced or moved
    while this supervisor ran (by anyone).

    Writing on would go into a file nobody opens again, so the supervisor
    takes no new work: submits raise this. What it holds in memory stays
    readable; running units' ends are held in memory, not durable, and say so.
    Close it and start a supervisor on a state dir whose ledger is in place.
    """


class ValueVersionMismatch(LedgerError):
    """A pickled durable value was written by other Python or package versions.

    cloudpickle bytes are only readable by the versions that wrote them, so the
    value is refused rather than half-loaded.
    """


class Cancelled(BaseException):
    """Raised inside a unit at a requested cancel.

    A ``BaseException`` so that ``except Exception`` in user code cannot swallow it.
    """


class TeammateEnded(WorkunitsError):
    """A tell or ask reached a teammate that has ended or is ending (stop, cancel, kill).

    Also raised to an asker whose teammate ended before it answered: an ask is
    never left waiting on a unit that cannot answer any more.
    """


class TeammateRestarted(TeammateEnded):
    """An ask's teammate crashed and was restarted (``restart=``) before it answered.

    The new attempt starts afresh and never saw the ask; asking again reaches it.
    """


class AskTimeout(WorkunitsError, TimeoutError):
    """An ask got no answer within its timeout (the teammate may still answer; it is dropped)."""


class SignalTimeout(WorkunitsError, TimeoutError):
    """``ctx.wait_for(name, timeout=...)`` received no signal ``name`` within its timeout.

    A signal sent later is kept for the unit: the next ``wait_for(name)`` receives it.
    """


class NotRunning(WorkunitsError):
    """A scripted unit (``workunits.testing``) has ended or is ending: no more commands."""


class TeammateError(WorkunitsError):
    """A teammate's handler raised an exception that could not be unpickled here.

    When the exception does unpickle, ``ask`` raises it itself instead.
    """

    def __init__(self, type_name: str, message: str, traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = traceback

    def __reduce__(self) -> tuple[type[TeammateError], tuple[str, str, str]]:
        return (type(self), (self.type_name, self.message, self.traceback))


E = TypeVar("E", bound=BaseException)


def copy_to_raise(exc: E) -> E:
    """A copy of ``exc`` for one of several threads that all raise it: one exception
    object raised in several threads at once would share (and garble) its traceback.
    ``exc`` itself when its class cannot be copied."""
    try:
        clone = copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception class copy cannot rebuild
        return exc
    clone.__cause__ = exc.__cause__
    return clone
