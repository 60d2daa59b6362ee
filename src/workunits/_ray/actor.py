"""Remote units (``r``): a callable run as a Ray task.

``RemoteActor`` runs in the supervisor process, one pykka actor per unit, like
every kind. It owns the unit's transcript (the output file is a second name of
it, as for agents), places the work on Ray once Ray is up, and turns what comes up
the unit's stream into transcript events, progress and checkpoint reports, and
at the end one outcome. It never blocks on Ray: a follower thread reads the
stream and tells it (see ``workunits._ray``). Remote teammates
(``remote_teammate``) run in a subclass.

Ending: ``kill`` force-cancels the task (``ray.cancel(force=True)``) or kills
the actor (``ray.kill``); ``cancel`` posts on the cancel board (a teammate gets
a direct call) and the supervisor escalates to a kill after the grace. A worker
or node that goes away under a unit ends it ``failed`` with reason ``lost``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import cloudpickle
import orjson

from workunits._core.errors import SpecError
from workunits._core.record import Outcome
from workunits._core.status import Reason, Status
from workunits._ray.follower import Batch, StreamEnded, StreamFailed
from workunits._ray.placement import Placement, RemoteWork
from workunits._ray.runtime import RayApi, RayRuntime, ray_options
from workunits._ray.worker.frames import Emitted, Output, RemoteCall, Returned, Started
from workunits._unit.transcript import TranscriptWriter
from workunits._util import outputfile
from workunits._wire import frames as m
from workunits._wire.actor_messages import CheckpointReport, ProgressReport
from workunits._wire.specs import DEFAULT_OUTPUT_CAP, name_of
from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.process_events import TellActor

log = logging.getLogger(__name__)


def pickle_call(what: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Pickle the call in the caller's thread: a SpecError here registers nothing."""
    try:
        return bytes(cloudpickle.dumps((target, tuple(args), dict(kwargs))))
    except Exception as exc:
        raise SpecError(
            f"cannot pickle {what} or its arguments for Ray: {type(exc).__name__}: {exc}"
        ) from exc


@dataclass(frozen=True, slots=True)
class RemoteSpec(RemoteWork):
    """A callable to run as one Ray task."""

    payload: bytes
    name: str
    ray_options: dict[str, Any] = field(default_factory=dict)
    output_cap: int = DEFAULT_OUTPUT_CAP

    @classmethod
    def build(
        cls,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        resources: Mapping[str, float] | None = None,
    ) -> RemoteSpec:
        if not callable(fn):
            raise SpecError(f"a remote unit runs a callable, got {type(fn).__name__}")
        return cls(pickle_call(name_of(fn), fn, args, kwargs), name_of(fn), ray_options(resources))

    def place(self, api: RayApi, call: RemoteCall) -> Placement:
        return TaskPlacement(api, call, self.ray_options)


class TaskPlacement:
    """A remote unit as one Ray streaming-generator task."""

    def __init__(self, api: RayApi, call: RemoteCall, options: Mapping[str, Any]) -> None:
        self._api = api
        self._key = call.key
        self._cancel_posted = False
        self.stream: Any = api.task_for(options).remote(call, api.board_name)

    def kill(self) -> None:
        self._api.ray.cancel(self.stream, force=True)

    def cancel(self) -> None:
        self._cancel_posted = True
        self._api.request_cancel(self._key)

    def release(self) -> None:
        if self._cancel_posted:
            self._api.forget(self._key)


# -- messages to a RemoteActor ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RayReady:
    api: RayApi | None
    error: str | None


class RemoteActor(WorkActor):
    sandboxed: ClassVar[bool] = False  # its work runs on Ray's hosts, outside any sandbox
    kind: ClassVar[str] = "remote"
    runtime: ClassVar[RayRuntime | None] = None  # set on the class a supervisor registers

    @classmethod
    def bound_to(cls, runtime: RayRuntime) -> type[Self]:
        """This class for one supervisor's Ray runtime (what ``kinds.add`` takes)."""
        return type(cls.__name__, (cls,), {"runtime": runtime, "__module__": cls.__module__})

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, RemoteWork):
            raise SpecError(f"a remote unit needs a RemoteSpec, got {type(spec).__name__}")

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__(unit)
        self.spec: RemoteWork = unit.spec
        self._transcript_path = outputfile.transcript_path(unit.state_dir, unit.id)
        self._transcript_fd: int | None = None
        self._transcript: TranscriptWriter | None = None
        self._placement: Placement | None = None
        self._result: m.ReturnValue | None = None
        self._error: m.Error | None = None

    # -- start (this actor's thread) ------------------------------------------------

    def launch(self) -> None:
        runtime = self.runtime
        if runtime is None:
            raise SpecError("the remote kind was registered without a Ray runtime")
        # A retry's attempt appends to the transcript of the attempts before it.
        fd, first_seq = self.unit.open_transcript(self._transcript_path)
        self._transcript_fd = fd
        self._transcript = TranscriptWriter(fd, first_seq)
        api = runtime.ready()
        if api is not None:
            self._place(api)
            return
        teller = TellActor(self.actor_ref)

        def ready(api: RayApi | None, error: str | None) -> None:  # the workunits-ray thread
            teller.tell(_RayReady(api, error))

        runtime.when_ready(ready)

    def _place(self, api: RayApi) -> None:
        call = RemoteCall(
            unit_id=self.unit.id,
            kind=self.kind,
            attempt=self.unit.attempt,
            checkpoint=self.unit.checkpoint,
            payload=self.spec.payload,
        )
        try:
            self._placement = self.spec.place(api, call)
        except Exception as exc:  # noqa: BLE001 - Ray refused the work: the unit fails, saying why
            self._end(Outcome(Status.FAILED, error=f"Ray did not take the unit: {exc!r}"))
            return
        tell = TellActor(self.actor_ref).tell
        api.followers.follow(self._placement.stream, tell, f"workunits-{self.unit.id}")
        self._placed()

    def _placed(self) -> None:
        """The work is on Ray (a hook: a remote teammate sends what waited for this)."""

    # -- messages (this actor's thread) -------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        match message:
            case Batch(frames):
                for frame in frames:
                    self._from_unit(frame)
            case StreamEnded():
                self._end(self._outcome())
            case StreamFailed(lost, error):
                self._end(self._outcome_of_failure(lost, error))
            case _RayReady(api, error):
                if api is not None and not self._finished:
                    self._place(api)
                elif api is None:
                    self._end(self._outcome_of_failure(False, error or "Ray is unavailable"))
            case _:
                return super().on_receive(message)
        return None

    def _from_unit(self, frame: Any) -> None:
        unit, write = self.unit, self._write
        match frame:
            case Output(stream, text):
                write(stream, data=text)
            case m.Progress(fraction, text, evidence):
                write("progress", fraction=fraction, message=text)
                unit.tell_supervisor(ProgressReport(unit.id, fraction, text, evidence))
            case m.Checkpoint(state):
                write("checkpoint", state=orjson.Fragment(state))
                unit.tell_supervisor(CheckpointReport(unit.id, unit.attempt, state))
            case Emitted(data):
                write("event", data=orjson.Fragment(data))
            case Started(pid, host, node_id):
                write("start", id=unit.id, attempt=unit.attempt, pid=pid, host=host, node=node_id)
            case Returned(result, preview):
                # The result (or error) is the stream's last frame: the unit ends here,
                # without waiting ~1 ms more for Ray to report the generator's end.
                self._result = result
                if result.format == "json":
                    write("result", value=orjson.Fragment(result.value))
                else:
                    write("result", value=preview, format=result.format)
                self._end(self._outcome())
            case m.Error(error_type, text, traceback, _, _):
                self._error = frame
                write("error", error_type=error_type, message=text, traceback=traceback)
                self._end(self._outcome())
            case _:
                log.warning("%s: unexpected frame %r", unit.id, frame)

    def _write(self, type_: str, **fields: Any) -> None:
        if self._transcript is not None:
            self._transcript.write(type_, **fields)

    # -- ending -----------------------------------------------------------------------

    def signal_work(self, signum: int) -> None:
        """SIGKILL: end the work on Ray now; anything else: ask it to stop."""
        placement = self._placement
        if placement is None:
            # Not on Ray yet (Ray is starting): the body never runs.
            self._end(Outcome(Status.KILLED, reason=self._ending or Reason.KILLED))
            return
        try:
            if signum == signal.SIGKILL:
                placement.kill()
            else:
                placement.cancel()
        except Exception:
            # The stream's end (or the escalation after the grace) still ends the unit.
            log.exception("%s: Ray refused to end the work", self.unit.id)

    def _outcome(self) -> Outcome:
        if self._ending is not None:
            return Outcome(Status.KILLED, reason=self._ending)
        if self._error is not None:
            err = self._error
            text = f"{err.type}: {err.message}"
            if err.traceback:
                text += "\n" + err.traceback.rstrip()
            return Outcome(Status.FAILED, error=text, cause=err.cause, error_types=err.error_types)
        if self._result is None:
            return Outcome(Status.FAILED, error="the remote unit ended without a result")
        return Outcome(
            Status.COMPLETED, result=self._result.value, result_format=self._result.format
        )

    def _outcome_of_failure(self, lost: bool, error: str) -> Outcome:
        if self._ending is not None:
            return Outcome(Status.KILLED, reason=self._ending)
        if lost:
            return Outcome(Status.FAILED, reason=Reason.LOST, error=f"lost: {error}")
        return Outcome(Status.FAILED, error=error)

    def _end(self, outcome: Outcome) -> None:
        """Write the transcript's last event, report the outcome once, free Ray's side."""
        if self._finished:
            return
        if outcome.reason is Reason.HANDED_OVER:  # not an end: the next attempt resumes it
            self._write("handed-over", attempt=self.unit.attempt)
        else:
            self._write(
                "end",
                status=outcome.status.value,
                reason=None if outcome.reason is None else outcome.reason.value,
            )
        self._close_transcript()
        self.finish(outcome)
        if self._placement is not None:
            try:
                self._placement.release()
            except Exception:
                log.exception("%s: could not release its Ray resources", self.unit.id)

    def _close_transcript(self) -> None:
        self._transcript = None
        if self._transcript_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._transcript_fd)
            self._transcript_fd = None

    def on_stop(self) -> None:
        self._close_transcript()
        super().on_stop()
