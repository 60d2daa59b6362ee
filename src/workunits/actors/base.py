"""WorkActor: the base class of every kind. One actor per unit.

A WorkActor owns its unit's output file and its OS process (or whatever stands
for the work). It starts the work in ``on_start`` (its own thread), answers
``kill``/``cancel``/``escalate`` from the supervisor, and reports the outcome
exactly once with ``finish``, after which it stops. It never asks the
supervisor anything: it only tells, so no ask cycle can deadlock.

Subclasses implement ``launch`` and ``signal_work``; see ``ShellActor``.
"""

from __future__ import annotations

import logging
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

if TYPE_CHECKING:
    from workunits.supervisor.reaper import Reaper

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UnitBinding:
    """Everything a WorkActor gets from the supervisor when it starts."""

    id: str
    spec: Any
    output_path: str
    timeout: float | None
    clock: Clock
    reaper: Reaper
    report_pid: Callable[[str, int], None]
    report_end: Callable[[str, Outcome], None]


@dataclass(frozen=True, slots=True)
class Kill:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Escalate:
    pass


class WorkActor(pykka.ThreadingActor):
    """Base of all kinds. Methods run in this actor's own thread (pykka)."""

    kind: ClassVar[str] = "work"
    """The kind's name, as it appears in records (``"shell"``, ``"agent"``…)."""

    # Daemon threads are a safety net only: Supervisor.close() stops every actor.
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__()
        self.unit = unit
        self._ending: Reason | None = None
        self._finished = False

    # -- hooks for subclasses --------------------------------------------------

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        """Raise SpecError when ``spec`` cannot make a unit of this kind (caller's thread)."""

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
            self.finish(Outcome(Status.FAILED, error=_describe_launch_error(exc)))

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
        self.unit.report_end(self.unit.id, outcome)
        self.stop()

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


def _describe_error(head: str, exc: BaseException) -> str:
    head = f"{head}: {type(exc).__name__}: {exc}"
    return head + "\n" + "".join(traceback.format_exception(exc)).rstrip()


def _describe_launch_error(exc: BaseException) -> str:
    head = f"could not start: {type(exc).__name__}: {exc}"
    return head + "\n" + "".join(traceback.format_exception(exc)).rstrip()
