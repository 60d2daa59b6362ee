"""WorkActor: the base class of every kind. One actor per unit.

A WorkActor owns its unit's output file and its OS process (or whatever stands
for the work). It starts the work in ``on_start`` (in its own thread), answers
``kill``/``cancel``/``escalate`` from the supervisor, and reports the outcome
exactly once with ``finish``, after which it stops. It
never asks the supervisor anything: it only tells, so no ask cycle can deadlock.

Subclasses implement ``launch`` and ``signal_work``; see ``ShellActor``. A kind
whose work is a zygote process passes ``process_watch()`` with its spawn
request: the zygote's events then reach the supervisor without passing
through this actor when it has nothing to add (``end_on_exit``).

Every unit actor is a plain ``pykka.ThreadingActor`` extended through pykka's
documented hooks only (``on_start``, ``on_receive``, ``on_stop``,
``on_failure``): no pykka private name, so a pykka release cannot silently
change how a unit runs (issue 12).
"""

from __future__ import annotations

import abc
import functools
import logging
import os
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import pykka

from workunits._core.clock import Clock
from workunits._core.record import Outcome
from workunits._core.sandbox import Sandbox
from workunits._core.status import Reason, Status
from workunits._sandbox.isolation import Isolation
from workunits._sandbox.plan import Confinement
from workunits._unit.transcript import last_seq
from workunits._util import outputfile
from workunits._wire.actor_messages import Cancel, Escalate, Kill, Told
from workunits.actors.kind_code import call_kind
from workunits.actors.process_events import ProcessWatch
from workunits.actors.warm_files import WarmFiles

if TYPE_CHECKING:
    from workunits._pool import WorkerPool
    from workunits._zygote.client import ZygoteClient
    from workunits._zygote.reaper import Reaper

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UnitBinding:
    """Everything a WorkActor gets from the supervisor when it starts."""

    id: str
    spec: Any
    output_path: str
    state_dir: str
    timeout: float | None
    attempt: int
    checkpoint: bytes | None  # orjson of the last checkpoint, for a resumed attempt
    clock: Clock
    reaper: Reaper
    zygote: ZygoteClient
    report_pid: Callable[[str, int], None]  # any thread: the record shows the pid
    report_end: Callable[[str, Outcome], None]  # any thread; use ``finish`` (exactly once)
    tell_supervisor: Callable[[Any], None]  # kind-specific requests, e.g. spawn a child
    pool: WorkerPool | None = None  # the supervisor's workers for pooled units (reuse=True)
    files: WarmFiles | None = None  # output files made ahead of launches; None: create them
    traceparent: str | None = None  # its span's context, for its process (supervisor.tracing)
    input_fd: int | None = None  # with ``stdin=True``: the read end of its stdin pipe
    sandbox: Sandbox | None = None  # its policy (None: a kind that runs no process here)
    isolation: Isolation | None = None  # the supervisor's (None: nothing is confined)

    def confinement(self) -> Confinement | None:
        """What this unit's process applies to itself (None: unconfined)."""
        if self.isolation is None:
            return None
        return self.isolation.confinement(self.id, self.attempt, self.sandbox)

    def sandbox_note(self) -> dict[str, Any] | None:
        """The policy and what of it is enforced, for a transcript's first line."""
        if self.isolation is None or self.sandbox is None:
            return None
        return self.isolation.note(self.sandbox)

    def create_file(self, path: str, *, append: bool = False) -> int:
        """A new file for this unit at ``path`` (refused if anything is there), opened
        for writing: a warm one when the supervisor has one ready."""
        if self.files is None:
            return outputfile.create(path, append=append)
        return self.files.create(path, append=append)

    def open_transcript(self, path: str) -> tuple[int, int]:
        """This attempt's transcript at ``path``, with the output file made a second
        name of it: its append descriptor, and the ``seq`` its next event takes.

        A later attempt (a retry, a resume) appends to what the earlier ones
        wrote, and the output name the earlier one left gives way to a new one.
        """
        first_seq = 1
        if self.attempt > 1 and os.path.lexists(path):
            fd = outputfile.reopen_for_append(path)
            first_seq = last_seq(path) + 1
            outputfile.remove(self.output_path)
        else:
            fd = self.create_file(path, append=True)
        try:
            outputfile.link(path, self.output_path)
        except BaseException:
            os.close(fd)
            raise
        return fd, first_seq


def _contained_hook(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, a kind's own pykka hook ``name``, run under ``call_kind`` (``_KindMeta``).

    The outermost ``on_start`` (the one pykka calls; a subclass's calls its base's
    through ``super()``) fails the unit when it raises, then raises again: pykka
    logs it and stops the actor.
    """

    @functools.wraps(fn)
    def hook(self: WorkActor, *args: Any) -> Any:
        kind = type(self)
        if name == "on_receive":
            return call_kind(kind, fn, self, *args, hook=f"handling {type(args[0]).__name__}")
        if name != "on_start" or self._in_on_start:
            return call_kind(kind, fn, self, *args, hook=name)
        self._in_on_start = True
        try:
            return call_kind(kind, fn, self, *args, hook=name)
        except Exception:
            try:
                self.on_failure(*sys.exc_info())
            except Exception:
                log.exception("%s: on_failure raised after on_start did", self.unit.id)
            raise
        finally:
            self._in_on_start = False

    return hook


# pykka's hooks, which run a kind's code: each class's own are wrapped (``_KindMeta``).
_HOOKS = ("on_start", "on_receive", "on_stop", "on_failure")


class _KindMeta(abc.ABCMeta):  # pykka.Actor is an abc.ABC
    """Contain a kind's faults in pykka's hooks; launch a unit's work as its actor is created.

    Each class's own ``on_start``, ``on_receive``, ``on_stop`` and ``on_failure``
    are wrapped as the class is made, so what a kind raises there that is not an
    Exception becomes a ``KindFault`` (``kind_code``): pykka's actor loop would
    stop every actor of the supervisor for it. An ``on_start`` that raises fails
    the unit (``on_failure``) before pykka stops the actor: pykka calls no hook
    then, which would leave the unit running for ever, unkillable.

    A unit's work is launched as its actor is created, before its thread starts.

    ``pykka.Actor.start`` creates the actor, registers it, then starts its
    thread and waits for that thread to run. A kind whose ``launch_early()``
    says so has its work launched in between, in the starting (the
    supervisor's) thread, so the work does not wait for a thread start; the
    zygote's events for it queue in the actor's inbox until its thread runs.
    The kind's ``__init__`` runs here too, in the starting thread: what it
    raises is contained (``kind_code``), and fails the start of this unit only.
    """

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> None:
        super().__init__(name, bases, namespace)
        for hook in _HOOKS:
            fn = namespace.get(hook)
            if callable(fn):
                setattr(cls, hook, _contained_hook(hook, fn))

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        create = functools.partial(super().__call__, *args, **kwargs)
        actor = call_kind(cls, create, hook="__init__")
        actor._on_creation()
        return actor


class WorkActor(pykka.ThreadingActor, metaclass=_KindMeta):
    """Base of all kinds. Methods run in this actor's own thread (pykka); ``launch``
    in the supervisor's when ``launch_early()`` is True."""

    kind: ClassVar[str] = "work"
    """The kind's name, as it appears in records (``"shell"``, ``"agent"``…)."""

    relays_notifications: ClassVar[bool] = False
    """True for kinds whose process takes its children's notices (agents)."""

    accepts_messages: ClassVar[bool] = False
    """True for kinds that take ``tell``/``ask`` messages by ID (teammates).

    Such an actor must handle ``DeliverToUnit`` and ``StopTeammate`` and report
    each answer as ``Answered``: subclass ``TeammateActor``.
    """

    sheddable: ClassVar[bool] = False
    """True for kinds ``Supervisor.shed`` may kill to free the machine (dreams)."""

    sandboxed: ClassVar[bool] = True
    """True for kinds whose work is a process on this machine, confined by its sandbox
    policy (``wu.Sandbox``); False for kinds that run elsewhere (Ray)."""

    inline: ClassVar[bool] = False
    """True for kinds whose handlers never block nor ask anyone. Kept so that kinds
    which set it still load; it changes nothing now: every unit actor has a thread
    of its own (pykka's public API has no way to run an actor on its senders'
    threads)."""

    # Daemon threads are a safety net only: Supervisor.close() stops every actor.
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__()
        self.unit = unit
        # Written in this actor's thread only (first reason wins); read by
        # ``end_on_exit`` on the Reaper thread, which must see it once we have
        # signalled the work, so it is set before any signal is sent.
        self._ending: Reason | None = None
        self._finished = False
        # Taken by whoever reports the end (this thread, or the Reaper's ``end_on_exit``).
        self._end_claim = threading.Lock()
        self._watch: ProcessWatch | None = None  # this unit's process, if it has one
        # None: not launched yet (on_start launches); else what launch() raised, if anything.
        self._launched: tuple[Exception | None] | None = None
        self._in_on_start = False  # a subclass's on_start is calling super()'s (_contained_hook)
        self._confinement: Confinement | None = None  # set by ``confinement()`` at launch
        # A resource limit the unit's tree ran into, as the zygote saw it (Reaper thread,
        # before ``end_on_exit``); see ``limit_reason``.
        self.limit_hit: str | None = None

    # -- hooks for subclasses --------------------------------------------------

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        """Raise SpecError when ``spec`` cannot make a unit of this kind.

        Runs on the supervisor's thread, as the submit is registered: every other
        call and unit waits meanwhile, and a submit that waits longer than
        ``ask_timeout`` fails. So it is quick and does no I/O: it checks the spec
        in hand, nothing it would fetch.
        """

    @classmethod
    def actor_for(cls, spec: Any) -> type[WorkActor]:
        """The class that runs a unit of this kind with ``spec`` (after ``validate_spec``).

        A kind with more than one way to run picks here: a teammate runs in a local
        process or, with ``remote=True``, in a Ray actor. The record's ``kind`` is
        that class's ``kind``, and a class other than this one checks the spec too
        (its ``validate_spec``), so its own rules hold however a unit reached it.
        """
        return cls

    # -- durability: how the ledger keeps a spec, and whether a lost unit resumes --

    @classmethod
    def to_durable(cls, spec: Any, timeout: float | None) -> Any:
        """What the ledger stores for ``spec`` (JSON, a ledger ``Call``, or anything picklable)."""
        return (spec, timeout)

    @classmethod
    def from_durable(cls, stored: Any) -> tuple[Any, float | None]:
        """The spec and timeout back from what ``to_durable`` gave the ledger."""
        spec, timeout = stored
        return spec, timeout

    @classmethod
    def resumable(cls, stored: Any, spec_format: str) -> bool:
        """Whether a unit lost with its session is started again (same ID, next attempt)."""
        return False

    def launch(self) -> None:
        """Start the work. Raise to fail the unit with the exception as its cause.

        Runs in this actor's thread, or in the supervisor's before that thread
        starts when ``launch_early()`` is True.
        """
        raise NotImplementedError

    def launch_early(self) -> bool:
        """True when ``launch`` may run in the supervisor's thread as the unit starts.

        Only for a launch that never blocks and takes well under a millisecond
        (the supervisor runs every unit's start): then the work starts without
        waiting for this actor's thread. False (the default) launches in this
        actor's own thread, where a launch may take its time.
        """
        return False

    def signal_work(self, signum: int) -> None:
        """Deliver ``signum`` to the work (SIGTERM to ask, SIGKILL to end)."""
        raise NotImplementedError

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome | None:
        """The unit's outcome when its zygote process exits, or None (the default).

        Runs on the Reaper thread, not this actor's: it may read the spec, the
        binding and the files, and ``self._ending``, nothing this actor changes
        otherwise. An outcome goes straight to the supervisor (one hop, not
        two) and this actor is then only told ``ProcessExited`` to stop. None:
        this actor gets ``ProcessExited`` and reports the end itself, when it has
        something to add (an agent drains its channel first).
        """
        return None

    def ended_on_exit(self, outcome: Outcome) -> None:
        """Reaper thread, once: ``end_on_exit``'s ``outcome`` is the one reported.

        Called just before the supervisor hears of the end, so what must be on
        disk before anyone sees it (an agent's transcript ``end`` event) is
        written here. Nothing by default.
        """

    def confinement(self) -> Confinement | None:
        """What this unit's process applies to itself (its sandbox's); None: unconfined.

        Called at launch (any thread that launches); its private temp dir, if
        any, is removed when this actor stops.
        """
        self._confinement = self.unit.confinement()
        return self._confinement

    def limit_reason(
        self, exit_code: int | None, signum: int | None, error: str | None = None
    ) -> Reason | None:
        """The resource limit that ended the unit, if one did (any thread).

        The zygote's word first (a cgroup's counters, its CPU watch); else what
        the kernel's rlimits do to a process (SIGXCPU, SIGXFSZ), or what a
        Python unit raised for want of memory, processes or files (``error``:
        ``"Type: message"``). A command that fails for want of them, under
        rlimits only, says so in its own output, not here.
        """
        policy = self.unit.sandbox
        if policy is None or not policy.limits() or (exit_code == 0 and signum is None):
            return None
        if self.limit_hit is not None:
            return Reason(self.limit_hit)
        # A shell reports its command's death by a signal as 128 + the signal's number.
        if policy.cpu_seconds is not None and signal.SIGXCPU in (signum, _by_shell(exit_code)):
            return Reason.CPU_LIMIT
        if policy.file_size is not None and signal.SIGXFSZ in (signum, _by_shell(exit_code)):
            return Reason.FILE_SIZE_LIMIT
        for field, reason, signs in _LIMIT_ERRORS:
            if getattr(policy, field) is not None and any(s in (error or "") for s in signs):
                return reason
        return None

    def process_watch(self) -> ProcessWatch:
        """The ``events`` to pass to the zygote with a spawn request for this unit."""
        self._watch = ProcessWatch(self)
        return self._watch

    # -- lifecycle -------------------------------------------------------------

    def _on_creation(self) -> None:
        """The starting (supervisor's) thread, in start order, before this actor's thread runs."""
        self._launch_now(early=True)

    def _launch_now(self, *, early: bool = False) -> None:
        """``launch``, kept with what it raised (``on_start`` fails the unit with it).

        ``early``: only when ``launch_early()`` says so, else nothing happens yet.
        Both are the kind's code: ``call_kind`` makes a ``sys.exit`` in them an error.
        """
        kind = type(self)
        try:
            if early and not call_kind(kind, self.launch_early):
                return
            call_kind(kind, self.launch)
        except Exception as exc:  # noqa: BLE001 - any launch error fails the unit, with its cause
            self._launched = (exc,)
        else:
            self._launched = (None,)

    def on_start(self) -> None:
        if self._launched is None:
            self._launch_now()
        assert self._launched is not None
        (error,) = self._launched
        if error is not None:
            self.finish(Outcome(Status.FAILED, error=_describe_error("could not start", error)))

    def on_receive(self, message: Any) -> Any:
        """Control messages from the supervisor; subclasses handle their own first."""
        match message:
            case Told(messages):  # a Reaper wake's tells (``process_events``), in order
                for each in messages:
                    self.on_receive(each)
            case Kill(reason):
                self.kill(reason)
            case Cancel(reason):
                self.cancel(reason)
            case Escalate():
                self.escalate()
            case _:
                log.warning("%s: unexpected message %r", self.unit.id, message)
        return None

    def kill(self, reason: Reason = Reason.KILLED) -> None:
        """SIGKILL the work now; the outcome will be ``killed`` with the first reason given."""
        if self._finished:
            return
        self._ending = self._ending or reason
        self.signal_work(signal.SIGKILL)

    def cancel(self, reason: Reason = Reason.CANCELLED) -> None:
        """Ask the work to stop (SIGTERM); the supervisor escalates after the grace."""
        if self._finished:
            return
        self._ending = self._ending or reason
        self.signal_work(signal.SIGTERM)

    def escalate(self) -> None:
        """The cancel grace is over: SIGKILL if the work is still there."""
        if not self._finished:
            self.signal_work(signal.SIGKILL)

    def finish(self, outcome: Outcome) -> None:
        """Report the outcome exactly once, then stop this actor.

        The outcome is dropped when the end was reported already (by
        ``end_on_exit`` on the Reaper thread): the first report wins.
        """
        if self._finished:
            return
        self._finished = True
        if self.claim_end():
            self.unit.report_end(self.unit.id, outcome)
        self.stop()

    def claim_end(self) -> bool:
        """True once only, for whoever reports the unit's end (any thread)."""
        return self._end_claim.acquire(blocking=False)

    def on_stop(self) -> None:
        """Release what the work holds (this actor's thread); subclasses call super()."""
        if self._watch is not None:
            self._watch.release()
        if self._confinement is not None and self._confinement.tmpdir is not None:
            shutil.rmtree(self._confinement.tmpdir, ignore_errors=True)

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """An exception escaped a handler (a bug in the kind): fail the unit, never hang it.

        Runs in this actor's thread after pykka has stopped the actor, which then
        takes no more messages, so nothing else could ever report the end.
        """
        if self._finished:
            return
        self._finished = True
        # Whatever the work holds must not outlive the unit: kill it, release it. The
        # kind's code, which may be what failed: contained (``kind_code``).
        kind = type(self)
        try:
            call_kind(kind, self.signal_work, signal.SIGKILL)
        except Exception:
            log.exception("%s: could not kill the work of a failed actor", self.unit.id)
        try:
            call_kind(kind, self.on_stop)
        except Exception:
            log.exception("%s: could not release the work of a failed actor", self.unit.id)
        error = ACTOR_FAILED
        if exception_value is not None:
            error = _describe_error(error, exception_value)
        if self.claim_end():
            self.unit.report_end(
                self.unit.id, Outcome(Status.FAILED, error=error, actor_failed=True)
            )

    def outcome_for_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        """Map how the process ended to the unit's outcome.

        Once we signalled the work, it ends ``killed`` with our reason whatever
        its exit status: it was cut short, and the race "exited just as we
        killed it" must not flip a cancel into a success or a failure.
        """
        return exit_outcome(self._ending, exit_code, signum, self.limit_reason(exit_code, signum))


def _by_shell(exit_code: int | None) -> int | None:
    """The signal a shell's exit code says its command died of (128 + N), if any."""
    return exit_code - 128 if exit_code is not None and 128 < exit_code < 128 + 65 else None


# What a Python unit raises when an rlimit refuses it: (field, reason, texts in its error).
_LIMIT_ERRORS = (
    ("memory", Reason.MEMORY_LIMIT, ("MemoryError",)),
    ("processes", Reason.PROCESSES_LIMIT, ("BlockingIOError", "can't start new thread")),
    ("open_files", Reason.OPEN_FILES_LIMIT, ("[Errno 24]",)),
)

# The error of a unit whose actor failed (``on_failure``): a bug in its kind.
ACTOR_FAILED = "the unit's actor failed"


def exit_outcome(
    ending: Reason | None,
    exit_code: int | None,
    signum: int | None,
    limit: Reason | None = None,
) -> Outcome:
    """``outcome_for_exit`` with the ending reason given (any thread).

    ``limit``: a resource limit ended it: ``killed`` when the kernel killed it,
    else ``failed`` (it gave up for want of processes or files), with the reason.
    """
    if ending is not None:
        return Outcome(Status.KILLED, exit_code=exit_code, signal=signum, reason=ending)
    if limit is not None:
        status = Status.KILLED if signum is not None else Status.FAILED
        return Outcome(status, exit_code=exit_code, signal=signum, reason=limit)
    if exit_code == 0:
        return Outcome(Status.COMPLETED, exit_code=0)
    return Outcome(Status.FAILED, exit_code=exit_code, signal=signum)


def _describe_error(head: str, exc: BaseException) -> str:
    """``head: Type: message``, then the traceback: a failed unit's error text."""
    head = f"{head}: {type(exc).__name__}: {exc}"
    return head + "\n" + "".join(traceback.format_exception(exc)).rstrip()
