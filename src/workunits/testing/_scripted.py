"""ScriptedWork: a deterministic in-memory kind with no OS process, and its driver.

A scripted unit does nothing on its own. The test tells it to write output, to
exit with a code, or to fail with an error, and every such call returns only
after the unit has done it, so a test never has to guess when something
happened. Kill and cancel from the supervisor end it at once (unless its spec
says to ignore the cancel, which lets a test walk the "SIGKILL after the grace"
path with a ``ManualClock``).

Threads: ``ScriptedWork`` methods run in the unit's own actor thread (pykka);
``ScriptedDriver`` methods run in the test's thread and ``ask`` the unit with a
timeout, so a call never hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from typing import Any, ClassVar

import pykka

from workunits._core.errors import NotRunning, SpecError, UnknownWork, WrongType
from workunits._core.record import Outcome, WorkRecord
from workunits._core.status import Status
from workunits._util import outputfile
from workunits.actors.base import UnitBinding, WorkActor
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.facade import Supervisor
from workunits.supervisor.handle import WorkHandle

DEFAULT_LETTER = "x"


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """What a scripted unit does by itself; everything else the test drives.

    ``ignore_cancel``: a cancel (SIGTERM) is recorded but ignored, so the unit
    ends only at SIGKILL: the escalation after the grace, or a kill.
    ``launch_error``: ``launch`` raises ``RuntimeError(launch_error)``, so the
    unit ends ``failed`` without ever running (a kind that cannot start).
    """

    ignore_cancel: bool = False
    launch_error: str | None = None


@dataclass(frozen=True, slots=True)
class WriteOutput:
    """Append ``data`` to the unit's output file; the ask answers with its length."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ExitWith:
    """End the unit as a process exit would: code 0 is ``completed``, else ``failed``.

    After a kill or cancel reached the unit it ends ``killed`` with that reason
    instead, as a shell unit does: the work was cut short.
    """

    code: int


@dataclass(frozen=True, slots=True)
class Fail:
    """End the unit ``failed`` with ``error`` as its cause (like an exception in an agent).

    After a kill or cancel reached the unit it ends ``killed`` (with the error kept).
    """

    error: str


@dataclass(frozen=True, slots=True)
class SignalsSeen:
    """Ask which signals the unit has received so far (a tuple of ints, in order)."""


class ScriptedWork(WorkActor):
    """A WorkActor with no OS process. Methods run in this unit's actor thread."""

    kind: ClassVar[str] = "scripted"

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__(unit)
        self.spec: ScriptSpec = unit.spec
        self._fd: int | None = None
        self.signals: list[int] = []

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, ScriptSpec):
            raise SpecError(f"a scripted unit needs a ScriptSpec, got {type(spec).__name__}")

    def launch(self) -> None:
        if self.spec.launch_error is not None:
            raise RuntimeError(self.spec.launch_error)
        self._fd = outputfile.create(self.unit.output_path)

    def signal_work(self, signum: int) -> None:
        """SIGKILL ends the unit now; SIGTERM too, unless the spec ignores cancels."""
        self.signals.append(signum)
        if signum == signal.SIGTERM and self.spec.ignore_cancel:
            return
        self._end(self.outcome_for_exit(None, signum))

    def on_receive(self, message: Any) -> Any:
        match message:
            case WriteOutput(data):
                return self._write(data)
            case ExitWith(code):
                self._command()
                self._end(self.outcome_for_exit(code, None))
                return None
            case Fail(error):
                self._command()
                self._end(self._outcome_for_error(error))
                return None
            case SignalsSeen():
                return tuple(self.signals)
            case _:
                return super().on_receive(message)

    def on_stop(self) -> None:
        # Stopped without an end of its own (supervisor shutdown): drop the descriptor.
        self._close()

    def _outcome_for_error(self, error: str) -> Outcome:
        # Like outcome_for_exit: once signalled, the unit ends killed with our reason.
        if self._ending is not None:
            return Outcome(Status.KILLED, error=error, reason=self._ending)
        return Outcome(Status.FAILED, error=error)

    def _command(self) -> None:
        if self._finished or self._fd is None:
            raise NotRunning(f"{self.unit.id} has ended; it takes no more commands")

    def _write(self, data: bytes) -> int:
        self._command()
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        return len(data)

    def _end(self, outcome: Outcome) -> None:
        # Close before reporting: the supervisor drains the file when the report lands.
        self._close()
        self.finish(outcome)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ScriptedDriver:
    """Starts and drives scripted units of one supervisor. Methods run in the caller's thread.

    Each call returns when the unit has acted: ``write`` when the bytes are in
    the output file, ``exit`` and ``fail`` when the terminal record exists.
    Commands to a unit that has ended (evicted too) raise ``NotRunning``; to an
    ID the state dir never saw, ``UnknownWork``.
    """

    def __init__(
        self,
        sup: Supervisor,
        letter: str = DEFAULT_LETTER,
        *,
        timeout: float = 10.0,
        register: bool = True,
    ) -> None:
        """Register ``ScriptedWork`` under ``letter`` (unless ``register=False``)."""
        self.sup = sup
        self.letter = letter
        self.timeout = timeout
        if register:
            sup.register_kind(letter, ScriptedWork)

    def start(
        self,
        spec: ScriptSpec | None = None,
        *,
        description: str = "",
        parent: str | None = None,
        timeout: float | None = None,
    ) -> WorkHandle:
        """Submit a scripted unit; returns once its ``launch`` has run.

        The unit is then ``running`` with its output file in place (or, given a
        ``launch_error``, failing: ``sup.wait`` has its record).
        """
        handle = self.sup.submit(
            self.letter,
            ScriptSpec() if spec is None else spec,
            description=description,
            parent=parent,
            timeout=timeout,
        )
        # A barrier: the unit's actor runs launch() before it takes any message.
        with contextlib.suppress(NotRunning):
            self.signals(handle)
        return handle

    def write(self, unit: WorkHandle | str, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` to the unit's output; returns its length once it is on disk."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise WrongType(f"data must be bytes, got {type(data).__name__}")
        return int(self._ask(unit, WriteOutput(bytes(data))))

    def exit(self, unit: WorkHandle | str, code: int = 0) -> WorkRecord:
        """End the unit with an exit code; returns its terminal record."""
        if isinstance(code, bool) or not isinstance(code, int):
            raise WrongType(f"code must be an int, got {type(code).__name__}")
        self._ask(unit, ExitWith(code))
        return self.sup.wait(str(unit), self.timeout)

    def fail(self, unit: WorkHandle | str, error: str) -> WorkRecord:
        """End the unit ``failed`` with ``error``; returns its terminal record."""
        self._ask(unit, Fail(str(error)))
        return self.sup.wait(str(unit), self.timeout)

    def signals(self, unit: WorkHandle | str) -> tuple[int, ...]:
        """The signals the unit has received so far (SIGTERM for a cancel, SIGKILL for a kill)."""
        return tuple(self._ask(unit, SignalsSeen()))

    def _ask(self, unit: WorkHandle | str, message: object) -> Any:
        work_id = str(unit)
        try:
            ref: pykka.ActorRef[WorkActor] = self.sup._ask(rq.UnitActor(work_id))
        except UnknownWork:
            # Either forgotten (get raises UnknownWork again) or no longer running.
            record = self.sup.get(work_id)
            raise NotRunning(f"{work_id} is {record.status.value}") from None
        try:
            return ref.ask(message, timeout=self.timeout)
        except pykka.ActorDeadError:
            raise NotRunning(f"{work_id} has ended; it takes no more commands") from None
