"""Agent units (``a``): a Python callable in its own process, forked by the zygote.

The agent's output file is a second name (a hard link) of its JSONL transcript.
Its process talks to this actor over one duplex channel: progress, checkpoints,
spawn requests, results and errors come in; cancel requests, replies and
children's ends go out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pykka

from workunits._core.errors import SpecError
from workunits._core.record import Outcome
from workunits._core.status import Reason, Status
from workunits._unit.transcript import append_event, cut_to
from workunits._util import framing, outputfile
from workunits._wire import durable
from workunits._wire import frames as m
from workunits._wire.actor_messages import (
    CheckpointReport,
    ChildEndedToUnit,
    ChildNoticeTaken,
    ControlChild,
    EventToUnit,
    ProcessExited,
    ProcessLost,
    ProcessSpawnFailed,
    ProgressReport,
    ReplyToUnit,
    SendFromUnit,
    SpawnChild,
)
from workunits._wire.specs import AgentSpec, Call
from workunits._wire.untrusted import unit_frames
from workunits._wire.zygote_protocol import Limits, SpawnCall
from workunits.actors.base import UnitBinding, WorkActor, exit_outcome
from workunits.actors.process_events import ProcessWatch, TellActor

if TYPE_CHECKING:
    from workunits._zygote.reaper import Reaper

# -- messages to the supervisor on behalf of the unit process ------------------


# -- messages from the supervisor -----------------------------------------------


@dataclass(frozen=True, slots=True)
class _FromUnit:
    message: Any


@dataclass(frozen=True, slots=True)
class _ChannelWritable:
    pass


@dataclass(frozen=True, slots=True)
class _ChannelClosed:
    torn: str | None = None  # it closed in the middle of a frame: how far in


@dataclass(frozen=True, slots=True)
class _ChannelBroken:
    why: str  # what reading the bytes raised


class _ChannelFrames:
    """The Reaper's side of a unit's channel: its bytes, as frames told to its actor.

    Bytes that are not a frame (something in the unit's process wrote on the
    channel's descriptor) end the reading for good: what follows them cannot be
    framed either, so the actor is told once, and the rest is dropped.
    """

    __slots__ = ("_actor", "_broken", "_reader")

    def __init__(self, ref: pykka.ActorRef[Any], reaper: Reaper) -> None:
        # An actor force-ended at shutdown takes no more; a wake's tells go as one.
        self._actor = TellActor(ref, reaper)
        self._reader = unit_frames()  # a unit's bytes build plain data only (``untrusted``)
        self._broken = False

    def on_data(self, data: bytes, fds: list[int]) -> None:  # Reaper thread
        for fd in fds:  # a unit has no business sending descriptors
            os.close(fd)
        if self._broken:
            return
        try:
            frames = self._reader.feed(data)
        except Exception as exc:  # noqa: BLE001 - whatever the unit's process wrote
            self._broken = True
            self._actor.tell(_ChannelBroken(f"{type(exc).__name__}: {exc}"))
            return
        for frame in frames:
            self._actor.tell(_FromUnit(frame))

    def on_close(self) -> None:  # Reaper thread
        held = self._reader.held()  # a frame it began (with junk, maybe) that never ended
        torn = f"it closed {held} bytes into a frame" if held and not self._broken else None
        self._actor.tell(_ChannelClosed(torn))


class AgentActor(WorkActor):
    """The agent kind (``a``): a callable in a process forked by the zygote, with its channel."""

    kind: ClassVar[str] = "agent"
    relays_notifications: ClassVar[bool] = True
    # Its units run in workers of the supervisor's pool (``PooledAgentActor``).
    pooled: ClassVar[bool] = False

    def __init__(self, unit: UnitBinding) -> None:
        super().__init__(unit)
        self.spec: AgentSpec = unit.spec
        self._channel: socket.socket | None = None
        self._outgoing: deque[memoryview] = deque()  # frames the socket has not taken yet
        self._channel_key: int | None = None
        self._channel_open = False
        self._exit: tuple[int | None, int | None] | None = None
        self._result: m.ReturnValue | None = None
        self._error: m.Error | None = None
        self._torn: str | None = None  # how its channel closed in the middle of a frame
        self._transcript_path = outputfile.transcript_path(unit.state_dir, unit.id)
        # Set on the Reaper thread (``ended_on_exit``) before ProcessExited is told to us.
        self._end_written = False

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        """An AgentSpec; ``reuse=True`` only where it is honoured: the built-in kind
        (``actor_for`` routes it to the pool) or a pooled kind."""
        if not isinstance(spec, AgentSpec):
            raise SpecError(f"an agent unit needs an AgentSpec, got {type(spec).__name__}")
        if spec.reuse and cls is not AgentActor and not cls.pooled:
            raise SpecError(
                f"kind {cls.kind!r} runs each unit in a process of its own, so it cannot "
                f"take reuse=True; subclass PooledAgentActor for a kind whose units run "
                f"in the pool's workers"
            )

    @classmethod
    def actor_for(cls, spec: Any) -> type[WorkActor]:
        """A pooled agent (``reuse=True``) runs in a worker of the supervisor's pool."""
        if cls is AgentActor and isinstance(spec, AgentSpec) and spec.reuse:
            from workunits.actors.pooled import PooledAgentActor  # noqa: PLC0415 - it imports us

            return PooledAgentActor
        return cls

    @classmethod
    def to_durable(cls, spec: AgentSpec, timeout: float | None) -> Any:
        """A ledger Call: stored by import reference when the callable has one."""
        return durable.agent_to_durable(spec, timeout)

    @classmethod
    def from_durable(cls, stored: Any) -> tuple[AgentSpec, float | None]:
        if not isinstance(stored, Call):
            return super().from_durable(stored)
        return durable.agent_from_durable(stored)

    @classmethod
    def resumable(cls, stored: Any, spec_format: str) -> bool:
        """An agent stored by import reference can be loaded by a later attempt."""
        return durable.agent_resumable(spec_format)

    # -- start ------------------------------------------------------------------

    def launch_early(self) -> bool:
        """Files, a socketpair and one request to a running zygote: quick enough for the
        supervisor's thread."""
        return self.unit.zygote.ready

    def launch(self) -> None:
        # Before the channel exists: a refused link must leave no socket behind.
        transcript_fd, first_seq = self.unit.open_transcript(self._transcript_path)
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except BaseException:
            os.close(transcript_fd)
            raise
        channel_fd = theirs.detach()
        handed = False  # the descriptors are _start_process's once it is called
        try:
            self._channel = ours
            frames = _ChannelFrames(self.actor_ref, self.unit.reaper)
            self._channel_key = self.unit.reaper.watch_stream(ours, frames.on_data, frames.on_close)
            self._channel_open = True
            call = SpawnCall(
                unit_id=self.unit.id,
                kind=self.kind,
                payload=self.spec.payload,
                attempt=self.unit.attempt,
                checkpoint=self.unit.checkpoint,
                first_seq=first_seq,
                limits=self._limits(),
                transcript_cap=self.spec.output_cap,
                traceparent=self.unit.traceparent,
                confinement=self.confinement(),
                sandbox=self.unit.sandbox_note(),
            )
            events = self.process_watch()
            handed = True
            self._start_process(call, transcript_fd, channel_fd, events)
        finally:
            if not handed:
                os.close(transcript_fd)
                os.close(channel_fd)

    def _start_process(
        self, call: SpawnCall, transcript_fd: int, channel_fd: int, events: ProcessWatch
    ) -> None:
        """Have the zygote fork the unit's process (a pooled agent hands it to a worker).

        Owns the two descriptors, whatever happens: the zygote gets copies of them
        in the request, so they are closed here once it is sent."""
        try:
            self.unit.zygote.spawn_call(call, transcript_fd, channel_fd, events)
        finally:
            os.close(transcript_fd)
            os.close(channel_fd)

    def _limits(self) -> Limits:
        return self.spec.limits

    # -- messages -----------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        match message:
            case _FromUnit(frame):
                self._from_unit(frame)
            case ProcessExited(exit_code, signum):
                self._exit = (exit_code, signum)
                self._close_channel()
                self._maybe_finish()
            case ProcessSpawnFailed(error):
                self._exit = (None, None)
                self._error = m.Error("SpawnFailed", error, "", None)
                self._close_channel()
                self._maybe_finish()
            case ProcessLost():  # the watch killed what was left of the group
                self._ending = self._ending or Reason.LOST
                self._exit = (None, None)
                self._close_channel()
                self._maybe_finish()
            case _ChannelClosed(torn):
                self._channel_open = False
                self._torn = torn  # its exit decides what that means (``_outcome``)
                self._maybe_finish()
            case _ChannelBroken(why):
                self._channel_broken(why)
            case _ChannelWritable():
                self._flush()
            case ReplyToUnit(reply):
                self._send(reply)
            case ChildEndedToUnit(record, redelivered):
                self._send(m.ChildEnded(record, redelivered))
            case EventToUnit(event):
                self._send(event)
            case _:
                return super().on_receive(message)
        return None

    def _from_unit(self, frame: Any) -> None:
        unit = self.unit
        match frame:
            case m.Progress(fraction, text, evidence):
                unit.tell_supervisor(ProgressReport(unit.id, fraction, text, evidence))
            case m.Checkpoint(state, consumed):
                unit.tell_supervisor(CheckpointReport(unit.id, unit.attempt, state, consumed))
            case m.ReturnValue():
                self._result = frame
            case m.Error():
                self._error = frame
            case m.Spawn() | m.SpawnMany():
                unit.tell_supervisor(SpawnChild(unit.id, frame))
            case m.Control():
                unit.tell_supervisor(ControlChild(unit.id, frame))
            case m.Send():
                unit.tell_supervisor(SendFromUnit(unit.id, frame))
            case m.NoticeTaken(work_id, status):
                unit.tell_supervisor(ChildNoticeTaken(work_id, status))
            case m.OutputCapped():
                # Seen before the exit is handled (the channel drains first), so a
                # unit that ends right after its last refused write is still killed.
                self.kill(Reason.OUTPUT_CAP)

    def _channel_broken(self, why: str) -> None:
        """Nothing the process says can be read any more (not its result either): it
        ends now, ``failed``, with this error rather than whatever it returns."""
        if self._finished:
            return
        self._error = m.Error("BrokenChannel", _broken_channel(why, killed=True), "", None)
        self.signal_work(signal.SIGKILL)

    def _send(self, message: Any) -> None:
        """Queue a frame for the process and send what the socket takes now.

        Never blocks: a process that does not read its channel (stopped, or busy
        in C code) must not hold this actor, or a Kill queued behind the send
        would never run. The rest goes when the Reaper says the socket has room.
        """
        if self._channel is None or self._exit is not None:
            return
        self._outgoing.append(memoryview(framing.encode(message)))
        if len(self._outgoing) == 1:
            self._flush()

    def _flush(self) -> None:
        channel = self._channel
        while self._outgoing and channel is not None and self._exit is None:
            data = self._outgoing[0]
            try:
                sent = channel.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                key = self._channel_key
                if key is None or not self.unit.reaper.when_writable(key, self._tell_writable):
                    self._outgoing.clear()  # the channel is closing: the process is gone
                return
            except OSError:  # the process is gone; its exit is on its way
                self._outgoing.clear()
                return
            if sent < len(data):
                self._outgoing[0] = data[sent:]
            else:
                self._outgoing.popleft()

    def _tell_writable(self) -> None:  # Reaper thread
        TellActor(self.actor_ref).tell(_ChannelWritable())

    def _close_channel(self) -> None:
        self._outgoing.clear()  # for a process that is gone
        if self._channel_key is not None:
            self.unit.reaper.close_stream(self._channel_key)
            self._channel_key = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # -- ending ---------------------------------------------------------------------

    def signal_work(self, signum: int) -> None:
        self.unit.zygote.signal(self.unit.id, signum)

    def cancel(self, reason: Reason = Reason.CANCELLED) -> None:
        """Cooperative: the unit sees ``ctx.cancelled``; the supervisor SIGKILLs after the grace."""
        if self._finished:
            return
        self._ending = self._ending or reason
        self._send(m.CancelRequested(handed_over=reason is Reason.HANDED_OVER))

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome | None:
        """Reaper thread: a unit we killed or cancelled ends ``killed`` with our reason
        whatever its channel still holds (see ``_outcome``), so its end waits neither
        for the drain nor for this actor's thread. A unit that ended by itself (its
        result or error is in the channel), one cut at its output cap (its transcript
        is cut first) and a lost one are ended by this actor, after the drain."""
        ending = self._ending
        if ending is None or ending in (Reason.OUTPUT_CAP, Reason.LOST):
            return None
        return self.outcome_for_exit(exit_code, signum)

    def outcome_for_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        """As the base says; a unit that stopped at the cancel it was asked for (its
        process exited ``EXIT_CANCELLED``) ends with the cancel's reason and no exit
        code: it did what was asked, and "exit code 75" would read as a failure."""
        if self._ending is not None and signum is None and exit_code == m.EXIT_CANCELLED:
            return Outcome(Status.KILLED, reason=self._ending)
        return super().outcome_for_exit(exit_code, signum)

    def ended_on_exit(self, outcome: Outcome) -> None:
        """The transcript's ``end`` event, before the supervisor hears of the end."""
        self._end_written = True
        self._write_end(outcome)

    def _maybe_finish(self) -> None:
        """Finish once the process is gone and its channel is drained (nothing is lost)."""
        if self._exit is None or self._channel_open or self._finished:
            return
        outcome = self._outcome(*self._exit)
        if not self._end_written:  # else the Reaper ended the unit (``end_on_exit``)
            self._write_end(outcome)
        self.finish(outcome)

    def _write_end(self, outcome: Outcome) -> None:
        with contextlib.suppress(OSError):
            if outcome.reason is Reason.HANDED_OVER:
                # Not an end: a deploy stopped this attempt, and the next supervisor
                # resumes the unit as its next attempt, in this same transcript.
                append_event(
                    self._transcript_path,
                    "handed-over",
                    attempt=self.unit.attempt,
                    exit_code=outcome.exit_code,
                    signal=outcome.signal,
                )
                return
            if outcome.reason is Reason.OUTPUT_CAP:
                # The capture stops at the cap; a unit that wrote its transcript
                # itself is cut back to it here.
                cut_to(self._transcript_path, self.spec.output_cap)
            append_event(
                self._transcript_path,
                "end",
                status=outcome.status.value,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
                reason=None if outcome.reason is None else outcome.reason.value,
            )

    def _outcome(self, exit_code: int | None, signum: int | None) -> Outcome:
        if self._ending is Reason.LOST:
            return Outcome(
                Status.FAILED,
                reason=Reason.LOST,
                error="lost: the zygote process that forked this unit died",
            )
        if self._ending is not None:
            return self.outcome_for_exit(exit_code, signum)
        if self._error is not None:
            err = self._error
            text = f"{err.type}: {err.message}"
            if err.traceback:
                text += "\n" + err.traceback.rstrip()
            return Outcome(
                Status.FAILED,
                exit_code=exit_code,
                signal=signum,
                error=text,
                cause=err.cause,
                error_types=err.error_types,
                reason=self.limit_reason(exit_code, signum, f"{err.type}: {err.message}"),
            )
        limit = self.limit_reason(exit_code, signum)
        if limit is not None and exit_code != 0:
            return exit_outcome(None, exit_code, signum, limit)
        if exit_code == 0 and self._torn is not None and self._result is None:
            # Its result was taken into junk (a return always sends one): a clean
            # exit says nothing of what it returned. A result that came whole wins
            # over a torn frame after it (a thread's progress cut by the exit), and
            # a death by a signal mid-write is told as that death, below.
            error = f"BrokenChannel: {_broken_channel(self._torn, killed=False)}"
            return Outcome(Status.FAILED, exit_code=0, error=error)
        if exit_code == 0:
            result = self._result or m.ReturnValue(b"null", "json")
            return Outcome(
                Status.COMPLETED, exit_code=0, result=result.value, result_format=result.format
            )
        if signum is not None:
            error = f"the unit process was killed by {signal.Signals(signum).name}"
        else:
            error = f"the unit process exited with code {exit_code}"
        return Outcome(Status.FAILED, exit_code=exit_code, signal=signum, error=error)

    def on_stop(self) -> None:
        self._close_channel()
        super().on_stop()


def _broken_channel(why: str, *, killed: bool) -> str:
    """The error of a unit whose channel carried what is not a frame."""
    return (
        f"the unit's channel to the supervisor carried bytes that are not a frame ({why}): "
        f"something in its process wrote on a descriptor it does not own"
        + ("; the unit was killed" if killed else "")
    )
