"""WorkActor: the base class of every kind. One actor per unit.

A WorkActor owns its unit's output file and its OS process (or whatever stands
for the work). It starts the work in ``on_start`` (its own thread), answers
``kill``/``cancel``/``escalate`` from the supervisor, and reports the outcome
exactly once with ``finish``, after which it stops. It never asks the
supervisor anything: it only tells, so no ask cycle can deadlock.

Subclasses implement ``launch`` and ``signal_work``; see ``ShellActor``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import pykka

from workunits._clock import Clock
from workunits._record import Outcome
from workunits._status import Reason, Status
from workunits._wire.actor_messages import Cancel, Escalate, Kill

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
    report_pid: Callable[[str, int], None]
    report_end: Callable[[str, Outcome], None]
    tell_supervisor: Callable[[Any], None]  # kind-specific requests, e.g. spawn a child
    pool: WorkerPool | None = None  # the supervisor's workers for pooled units (reuse=True)


class WorkActor(pykka.ThreadingActor):
    """Base of all kinds. Methods run in this actor's own thread (pykka)."""

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

    # Daemon threads are a safety net only: Supervisor.close() stops every actor.
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__()
        self.unit = unit
        self._ending: Reason | None = None
        self._finished = False
        self._pidfd: int | None = None  # the unit process, once it exists

    # -- hooks for subclasses --------------------------------------------------

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        """Raise SpecError when ``spec`` cannot make a unit of this kind (caller's thread)."""

    @classmethod
    def actor_for(cls, spec: Any) -> type[WorkActor]:
        """The class that runs a unit of this kind with ``spec`` (after ``validate_spec``).

        A kind with more than one way to run picks here: a teammate runs in a local
        process or, with ``remote=True``, in a Ray actor. The record's ``kind`` is
        that class's ``kind``.
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
        """Start the work. Raise to fail the unit with the exception as its cause."""
        raise NotImplementedError

    def signal_work(self, signum: int) -> None:
        """Deliver ``signum`` to the work (SIGTERM to ask, SIGKILL to end)."""
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------

    def on_start(self) -> None:
        try:
            self.launch()
        except Exception as exc:  # noqa: BLE001 - any launch error fails the unit, with its cause
            self.finish(Outcome(Status.FAILED, error=_describe_error("could not start", exc)))

    def on_receive(self, message: Any) -> Any:
        """Control messages from the supervisor; subclasses handle their own first."""
        match message:
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
        """Report the outcome exactly once, then stop this actor."""
        if self._finished:
            return
        self._finished = True
        self._release_process()
        self.unit.report_end(self.unit.id, outcome)
        self.stop()

    def adopt_process(self, pid: int, pidfd: int) -> None:
        """The zygote forked our process: keep its pidfd, tell the supervisor its pid."""
        self._pidfd = pidfd
        self.unit.report_pid(self.unit.id, pid)

    def kill_orphaned_group(self) -> None:
        """The zygote died: kill our process group ourselves, through the pidfd.

        A leader that is still alive pins its pid and group id, so the group
        kill cannot hit a stranger; a dead leader's stragglers were its
        zygote's to kill.
        """
        pidfd = self._pidfd
        if pidfd is None:
            return
        try:
            signal.pidfd_send_signal(pidfd, 0)
        except ProcessLookupError:
            return
        pid = _pid_of(pidfd)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    def _release_process(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def on_stop(self) -> None:
        self._release_process()

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
        # Whatever the work holds must not outlive the unit: kill it, release it.
        try:
            self.signal_work(signal.SIGKILL)
        except Exception:
            log.exception("%s: could not kill the work of a failed actor", self.unit.id)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s: could not release the work of a failed actor", self.unit.id)
        error = "the unit's actor failed"
        if exception_value is not None:
            error = _describe_error(error, exception_value)
        self.unit.report_end(self.unit.id, Outcome(Status.FAILED, error=error))

    def outcome_for_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        """Map how the process ended to the unit's outcome.

        Once we signalled the work, it ends ``killed`` with our reason whatever
        its exit status: it was cut short, and the race "exited just as we
        killed it" must not flip a cancel into a success or a failure.
        """
        if self._ending is not None:
            return Outcome(Status.KILLED, exit_code=exit_code, signal=signum, reason=self._ending)
        if exit_code == 0:
            return Outcome(Status.COMPLETED, exit_code=0)
        return Outcome(Status.FAILED, exit_code=exit_code, signal=signum)


def _pid_of(pidfd: int) -> int | None:
    """The pid a pidfd refers to (from /proc/self/fdinfo), or None once it has exited."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None


def _describe_error(head: str, exc: BaseException) -> str:
    """``head: Type: message``, then the traceback: a failed unit's error text."""
    head = f"{head}: {type(exc).__name__}: {exc}"
    return head + "\n" + "".join(traceback.format_exception(exc)).rstrip()
