"""``wu.current()``: the unit context, inside a unit process.

Methods run in the unit's own thread(s); the channel's reader thread fills in
cancel requests, replies, children's ends and monitors' events, and hands
messages for a teammate (or a wake-up at a cancel) to ``inbox`` once a kind's
runtime has opened it.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import queue
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar, cast

import cloudpickle

from workunits._core.errors import (
    AskTimeout,
    Cancelled,
    NoCurrentUnit,
    NotFinished,
    SignalTimeout,
    SpecError,
    SupervisorClosed,
    WorkunitsError,
)
from workunits._core.mailbox import Mailbox
from workunits._core.record import MonitorEvent, Notification, StallEvent, WorkRecord, storable_text
from workunits._core.retry import Retry, check_retry, error_types
from workunits._core.sandbox import Sandbox, check_sandbox
from workunits._core.seconds import wait_timeout
from workunits._core.status import is_terminal
from workunits._surface import batch, ops
from workunits._surface._generated import UnitContextVerbs
from workunits._surface.output_stream import STREAM_CHUNK, OutputStream
from workunits._surface.submission import Built, Submission, build
from workunits._unit import child_batch, tracing
from workunits._unit.capture import Capture
from workunits._unit.child_handles import ChildHandle, ChildTeammate
from workunits._unit.steps import Steps
from workunits._util import framing, strictjson
from workunits._util.signalname import check_name
from workunits._wire import frames as m
from workunits._wire.results import answer_of, result_of
from workunits._wire.specs import AgentSpec, Call, import_ref
from workunits._wire.submits import check_key

R = TypeVar("R")

_current: UnitContext | None = None


def current() -> UnitContext:
    """The context of the unit this code runs in; NoCurrentUnit (a RuntimeError) outside one."""
    if _current is None:
        raise NoCurrentUnit("wu.current() is only available inside a work unit's process")
    return _current


class UnitContext(UnitContextVerbs):
    """A unit's view of itself, from ``wu.current()`` in its own process.

    Progress, checkpoints, events, cancellation, and the child units it starts:
    the calls that take a unit (``wait``, ``kill``, ``stream``...) take one of
    its own descendants, reached through its channel to the supervisor.
    """

    def __init__(
        self,
        *,
        work_id: str,
        kind: str,
        attempt: int,
        last_checkpoint: Any,
        channel: socket.socket,
        transcript: Capture,
    ) -> None:
        self.id = work_id
        self.kind = kind
        self.attempt = attempt
        # A workflow's checkpoint also carries its step results; users see their state.
        self._steps = Steps(last_checkpoint) if kind == "workflow" else None
        self.last_checkpoint = last_checkpoint if self._steps is None else self._steps.state
        self._channel = channel
        # Serialises frames on the channel so two threads' frames never interleave.
        # Held across one send (which blocks only while the supervisor is slow to
        # read), never together with _cond, and never across a wait for a reply.
        self._send_lock = threading.Lock()
        self._transcript = transcript
        self._cancel = threading.Event()
        # The cancel is a deploy's: this attempt stops, the next supervisor resumes it.
        self.handed_over = False
        # Guards the replies, children's ends and events the reader thread files;
        # held for O(1) work (a dict or deque operation, a notify), never across I/O.
        self._cond = threading.Condition()
        self._reqs = itertools.count(1)
        self._replies: dict[int, m.Reply] = {}
        self._abandoned: set[int] = set()  # requests that timed out; their late replies are dropped
        self._lost = False
        # Messages for a teammate, or a wake-up at a cancel; None until a kind's runtime asks.
        self.inbox: queue.SimpleQueue[Any] | None = None
        self._ended: dict[str, WorkRecord] = {}  # children known to have ended, for wait
        self._noticed: set[str] = set()  # children whose notice went into the mailbox
        # A child's notice counts as acknowledged when this unit takes it.
        self._mailbox = Mailbox(work_id, on_ack=self._notice_taken)
        # The reader thread starts with the first request: until then only a cancel
        # can arrive, and progress()/checkpoint()/cancelled poll for it. A thread
        # costs a freshly forked process more than the rest of its start-up.
        self._reader: threading.Thread | None = None
        # Guards _reader and the channel's reads before it exists: held to start the
        # thread once, or for one non-blocking (MSG_DONTWAIT) poll of the channel.
        self._reader_lock = threading.Lock()
        self._frames = framing.FrameReader()
        # Signals (under _cond): per name, (seq, value) in seq order; every seq
        # this process was given, so one that comes twice (asked for, then
        # routed) is kept once; the seqs taken since the last checkpoint.
        self._signals: dict[str, list[tuple[int, Any]]] = {}
        self._signal_seqs: set[int] = set()
        self._taken_signals: list[int] = []
        self._signals_asked = False
        self._last_progress: tuple[float | None, str, dict[str, Any] | None] = (None, "", None)

    # -- the channel ------------------------------------------------------------

    def _notice_taken(self, notice: Notification) -> None:
        with contextlib.suppress(OSError):  # the channel is gone: the parent is ending
            self.send(m.NoticeTaken(notice.id, notice.status.value))

    def close_channel(self) -> None:
        """End the channel (a pooled worker is done with this unit), waking its reader."""
        with contextlib.suppress(OSError):
            self._channel.shutdown(socket.SHUT_RDWR)
        self._channel.close()

    def send(self, message: Any) -> None:
        """Send one raw message to this unit's actor (internal channel; prefer the methods)."""
        with self._send_lock:
            framing.send(self._channel, message)

    def _start_reader(self) -> None:
        with self._reader_lock:
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read, name="workunits-channel", daemon=True
                )
                self._reader.start()

    def _poll(self) -> None:
        """Take what has arrived without blocking (only before the reader thread runs)."""
        with self._reader_lock:
            if self._reader is not None:
                return
            while True:
                try:
                    data = self._channel.recv(1 << 16, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    return
                except OSError:
                    data = b""
                if not data:
                    self._lost_supervisor()
                    return
                self._dispatch(self._frames.feed(data))

    def open_inbox(self) -> queue.SimpleQueue[Any]:
        """Start taking teammate messages (and cancel wake-ups) into a queue; returns it."""
        if self.inbox is None:
            self.inbox = queue.SimpleQueue()
        self._start_reader()
        return self.inbox

    def _wake_inbox(self) -> None:
        if self.inbox is not None:
            self.inbox.put(m.CancelRequested())

    def _lost_supervisor(self) -> None:
        self._cancel.set()  # the supervisor is gone: stop at the next safe point
        with self._cond:
            self._lost = True
            self._cond.notify_all()
        self._wake_inbox()

    def _read(self) -> None:
        """The reader thread: cancel requests, replies, children's ends."""
        while True:
            try:
                frames = framing.recv_blocking(self._channel, self._frames)
            except (EOFError, OSError):
                self._lost_supervisor()
                return
            self._dispatch(frames)

    def _dispatch(self, frames: list[Any]) -> None:
        for frame in frames:
            if isinstance(frame, m.CancelRequested):
                self.handed_over = self.handed_over or frame.handed_over
                self._cancel.set()
                with self._cond:
                    self._cond.notify_all()  # a wait_for stops waiting
                self._wake_inbox()
            elif isinstance(frame, m.SignalArrived):
                with self._cond:
                    self._file_signal(frame)
            elif isinstance(frame, m.Reply):
                with self._cond:
                    if frame.req in self._abandoned:
                        self._abandoned.discard(frame.req)
                    else:
                        self._replies[frame.req] = frame
                        self._cond.notify_all()
            elif isinstance(frame, m.Deliver | m.Stop) and self.inbox is not None:
                self.inbox.put(frame)
            elif isinstance(frame, MonitorEvent | StallEvent):
                self._mailbox.put(frame)
            elif isinstance(frame, m.ChildEnded):
                self._child_ended(frame)

    def _child_ended(self, frame: m.ChildEnded) -> None:
        """A child's end: for ``wait``, and its notice into the mailbox, once.

        A new attempt is sent the ends its earlier attempts did not acknowledge
        (``redelivered``); one that also came as it happened is not put twice.
        """
        record = frame.record
        with self._cond:
            self._ended[record.id] = record
            self._cond.notify_all()
            known = record.id in self._noticed
            self._noticed.add(record.id)
        if known:
            return
        notice = Notification.of(record)
        if frame.redelivered:
            notice = dataclasses.replace(notice, redelivered=True)
        self._mailbox.put(notice)
        self._transcript.write(
            "child", child=record.id, status=record.status.value, kind=record.kind
        )

    def _request(self, make: Any, timeout: float | None = None) -> Any:
        """Send ``make(req)`` and wait for its reply; AskTimeout after ``timeout``."""
        self._start_reader()
        req = next(self._reqs)
        self.send(make(req))
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while req not in self._replies:
                if self._lost:
                    raise SupervisorClosed("the supervisor is gone; no reply will come")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._abandoned.add(req)
                    raise AskTimeout(f"no answer within {timeout} s")
                self._cond.wait(remaining)
            reply = self._replies.pop(req)
        if not reply.ok:
            if isinstance(reply.value, WorkunitsError):
                raise reply.value
            raise WorkunitsError(str(reply.value))
        return reply.value

    # -- progress, checkpoints, cancel -------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested; the next progress()/checkpoint() raises."""
        self._poll()
        return self._cancel.is_set()

    def _raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise Cancelled(f"{self.id} was cancelled")

    def progress(self, fraction: float | None = None, message: str = "", **evidence: Any) -> None:
        """Report progress (0.0-1.0 or None), a message and structured evidence.

        ``ctx.progress(0.4, "group 3/8", done=3, total=8)``: the evidence (strict
        JSON) is kept in the ledger with the report, which the supervisor stamps
        with the time it arrived. Raises Cancelled if asked to stop.
        """
        if fraction is not None and not (isinstance(fraction, int | float) and 0 <= fraction <= 1):
            raise SpecError(f"progress fraction must be between 0 and 1, got {fraction!r}")
        frac = None if fraction is None else float(fraction)
        if evidence:
            strictjson.dumps(evidence, "progress evidence")  # refused here, not in the supervisor
        # A message is free text: an undecodable byte in it (a path, say) is escaped,
        # not a failure of the unit.
        text = storable_text(str(message))
        self._last_progress = (frac, text, evidence or None)
        self.send(m.Progress(frac, text, evidence or None))
        extra = {"evidence": evidence} if evidence else {}
        self._transcript.write("progress", fraction=frac, message=text, **extra)
        self._raise_if_cancelled()

    def checkpoint(self, state: Any) -> None:
        """Save ``state`` (strict JSON) so a later attempt resumes from it; raises Cancelled."""
        strictjson.dumps(state, "checkpoint")
        self.last_checkpoint = state
        if self._steps is not None:
            self._steps.checkpoint(state, self._save)
        else:
            self._save(state)

    def _save(self, whole: Any) -> None:
        with self._cond:
            consumed = tuple(self._taken_signals)
            self._taken_signals.clear()
        self.send(m.Checkpoint(strictjson.dumps(whole, "checkpoint"), consumed))
        self._transcript.write("checkpoint", state=whole)
        self._raise_if_cancelled()

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` once as the step ``name`` of this workflow; its JSON result is durable.

        A resumed attempt returns the stored result without running the step
        again. A cancel takes effect between steps (Cancelled is raised).
        """
        if self._steps is None:
            raise SpecError("ctx.step() is for workflow units: start one with sup.workflow()")

        def log(step: str, skipped: bool) -> None:
            self._transcript.write("step", name=step, skipped=skipped)

        return self._steps.run(
            name, fn, args, kwargs, before=self._raise_if_cancelled, save=self._save, log=log
        )

    # -- signals: outside input ------------------------------------------------------

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """Block until the signal ``name`` arrives; return its value.

        Someone sends it with ``sup.signal(id, name, value)``, ``client.signal``,
        ``workunits signal ID NAME --value JSON`` or the HTTP API. Signals of
        one name come in the order they were sent; one sent before this wait,
        or while no supervisor ran, is kept in the ledger and received here. A
        signal counts as consumed at this unit's next checkpoint (or its end):
        a resumed attempt receives again those its last checkpoint did not
        cover. While it waits the unit's progress message is ``waiting for
        NAME``. Raises Cancelled at a requested cancel, SignalTimeout after
        ``timeout`` seconds (the signal, if it comes later, is kept).
        """
        check_name(name)
        wait_timeout(timeout)
        self._raise_if_cancelled()
        deadline = None if timeout is None else time.monotonic() + timeout
        self._ask_for_signals()
        found, value = self._take_signal(name)
        if found:
            return value
        fraction, message, evidence = self._last_progress
        self.send(m.Progress(fraction, f"waiting for {name}"))
        try:
            with self._cond:
                while not self._signals.get(name):
                    if self._cancel.is_set():
                        raise Cancelled(f"{self.id} was cancelled while waiting for {name}")
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise SignalTimeout(f"no signal {name!r} within {timeout} s")
                    self._cond.wait(remaining)
            _, value = self._take_signal(name)
        finally:
            with contextlib.suppress(OSError):  # the channel is gone: the unit is ending
                self.send(m.Progress(fraction, message, evidence))
        return value

    def _ask_for_signals(self) -> None:
        """Once per process: the signals this unit has not consumed, from the ledger."""
        if self._signals_asked:
            return
        kept = self._request(lambda req: m.Control(req, "signals", self.id))
        with self._cond:
            for frame in kept:
                self._file_signal(frame)
            self._signals_asked = True

    def _file_signal(self, frame: m.SignalArrived) -> None:
        """File one signal (``_cond`` held); a seq already seen is dropped."""
        if frame.seq in self._signal_seqs:
            return
        self._signal_seqs.add(frame.seq)
        queued = self._signals.setdefault(frame.name, [])
        bisect.insort(queued, (frame.seq, frame.value), key=lambda item: item[0])
        self._cond.notify_all()

    def _take_signal(self, name: str) -> tuple[bool, Any]:
        """(True, value) of the oldest signal ``name`` queued here, or (False, None)."""
        with self._cond:
            queued = self._signals.get(name)
            if not queued:
                return False, None
            seq, value = queued.pop(0)
            self._taken_signals.append(seq)
        return True, value

    def emit(self, event: Mapping[str, Any]) -> None:
        """Append an event of yours to the transcript (values JSON can't hold become repr,
        keys text; an integer beyond 64 bits is written as text): a record, not a store."""
        if not isinstance(event, Mapping):
            raise SpecError(f"an event is a mapping, got {type(event).__name__}")
        self._transcript.write("event", data=dict(event))

    # -- the transport of its verbs (``workunits._surface``): the unit's channel ---------

    def _run(self, op: ops.Op[R]) -> R:
        """Carry out ``op`` on one of this unit's descendants: a request on its channel."""
        answer: Any
        match op:
            case ops.Tell(teammate, message):
                payload = m.encode_message(message)
                answer = self._request(lambda req: m.Send(req, teammate, payload, False))
                return cast("R", None)
            case ops.Get(work_id):
                answer = self._control("get", work_id)
            case ops.List(q):
                answer = self._control("list", "", q)
            case ops.Kill(child):
                answer = bool(self._control("kill", child))
            case ops.Cancel(child, grace):
                answer = bool(self._control("cancel", child, grace))
            case ops.Stop(teammate):
                answer = bool(self._control("stop", teammate))
            case ops.ReadOutput(child, max_bytes):
                answer = self._control("read", child, max_bytes)[0]
            case ops.ReadChunk(child, offset, max_bytes):
                answer = self._control("chunk", child, (offset, max_bytes))
            case ops.Retry(child):
                answer = ops.Submitted(*self._control("retry", child))
            case ops.Signal(child, name, value):
                answer = bool(self._control("signal", child, (name, value)))
            case ops.SendInput(child, data, eof):
                answer = bool(self._control("input", child, (data, eof)))
            case _:
                raise SpecError(f"a unit cannot {type(op).__name__.lower()}: no such request")
        return cast("R", answer)

    def _control(self, op: str, target: str, arg: Any = None) -> Any:
        return self._request(lambda req: m.Control(req, op, target, arg))

    def _submit(self, submission: Submission) -> ChildHandle:
        child, created = self._spawn(submission)
        return ChildHandle(self, child, created=created)

    def _submit_teammate(self, submission: Submission) -> ChildTeammate:
        child, created = self._spawn(submission)
        return ChildTeammate(self, child, created=created)

    def _handle(self, submitted: ops.Submitted) -> ChildHandle:
        return ChildHandle(self, submitted.id, created=submitted.created)

    def _spawn(self, submission: Submission) -> tuple[str, bool]:
        """Ask the supervisor to start a child; the options are checked there, as a submit's.

        ``key`` makes the start idempotent among this unit's children: a later
        attempt of this unit (a retry, a resume after a restart) that starts a
        child under the same key gets the child the earlier attempt started.
        """
        made = build(submission)
        self._raise_if_cancelled()
        spawn = self._spawn_frame(made, tracing.current_traceparent())
        child_id, created = self._request(lambda req: dataclasses.replace(spawn, req=req))
        self._transcript.write("child", child=child_id, status="started", kind=made.letter)
        return str(child_id), bool(created)

    def _spawn_frame(self, made: Built, trace: str | None) -> m.Spawn:
        """A child's ``Spawn`` as the supervisor's restricted reader loads it: plain data,
        no code (``plain_data``); its ``req`` is set when it is sent."""
        options = made.options
        check_key(options.key)
        check_sandbox(options.sandbox)
        retry = check_retry(options.retry)
        if retry is not None:  # its exception types by name, not as classes
            options = dataclasses.replace(options, retry=Retry.from_json(retry.to_json()))
        return m.Spawn(0, made.letter, plain_data(made.spec), options, made.restart, trace)

    def _submit_batch(
        self, submissions: list[Submission], max_workers: int | None
    ) -> list[ChildHandle | BaseException]:
        return child_batch.spawn_many(self, submissions, max_workers)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        max_workers: int | None = None,
        sandbox: Sandbox | None = None,
    ) -> Generator[Any, None, None]:
        """``fn`` over the zipped items, one child agent per call, as ``Executor.map``:
        submitted now as one batch, results in order, a failure raised at its place,
        ``timeout`` for the whole map. At most ``max_workers`` run at once (default:
        the processors this process may use). Leaving the loop early kills the rest."""
        end = batch.deadline(timeout)
        workers = child_batch.parallelism() if max_workers is None else max_workers
        calls = batch.calls_of(fn, iterables)
        children = self.submit_many(calls, max_workers=workers, sandbox=sandbox)
        return batch.results([c.id for c in children], end, self.result, self.kill)

    def _wait(self, child_id: str, timeout: float | None) -> WorkRecord:
        """Block until a child of this unit is terminal (its end comes as ``ChildEnded``)."""
        self._start_reader()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            seen = child_id in self._ended
        if not seen:
            # It may have ended before this process started (an earlier attempt's
            # child): ask once. An end from now on comes as ChildEnded.
            now = self.get(child_id)
            if is_terminal(now.status):
                with self._cond:
                    self._ended.setdefault(child_id, now)
        with self._cond:
            while child_id not in self._ended:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
            record = self._ended.get(child_id)
        if record is None:
            raise NotFinished(self.get(child_id), timeout)
        return record

    def _result(self, child_id: str, timeout: float | None) -> Any:
        return result_of(self._wait(child_id, timeout))

    def _stream(self, child_id: str, follow: bool, poll: float) -> OutputStream:
        """The child's output, read through the channel; the child retained meanwhile."""
        self._control("retain", child_id)

        def release() -> None:
            with contextlib.suppress(WorkunitsError, OSError):  # the unit is ending
                self._control("release", child_id)

        return OutputStream(
            child_id,
            poll,
            read=lambda: self._control("read", child_id, STREAM_CHUNK),
            wait_a_little=lambda delay: self._wait_a_little(child_id, delay),
            release=release,
            follow=follow,
        )

    def _wait_a_little(self, child_id: str, delay: float) -> None:
        """Wait up to ``delay`` for the child to end (more output may come sooner)."""
        self._start_reader()
        with self._cond:
            if child_id not in self._ended:
                self._cond.wait(delay)

    def _notifications(self, lease: float) -> Mailbox:
        """This unit's mailbox: one notice per child that ends, and its monitors' events."""
        self._start_reader()
        return self._mailbox

    def _ask_teammate(self, teammate: str, message: Any, timeout: float | None) -> Any:
        payload = m.encode_message(message)
        return answer_of(self._request(lambda r: m.Send(r, teammate, payload, True), timeout))


def plain_data(spec: Any) -> Any:
    """``spec`` as the supervisor takes it from a unit: data its restricted reader loads
    (``_wire.untrusted``), no code. An agent's call goes by import reference with
    exact JSON arguments (so the child resumes from the ledger), or not at all (it
    runs all the same: its payload carries it, as bytes)."""
    call = getattr(spec, "call", None)
    if not isinstance(spec, AgentSpec) or call is None:
        return spec
    ref = import_ref(call.fn)
    exact = strictjson.dumps_if_exact({"a": list(call.args), "k": dict(call.kwargs)})
    plain = None
    if ref is not None and exact is not None:
        decoded = strictjson.loads(exact, "", "")
        plain = Call(ref, tuple(decoded["a"]), decoded["k"])
    return dataclasses.replace(spec, call=plain)


def error_frame(exc: BaseException, tb: str) -> m.Error:
    """The frame that reports ``exc``: its type, message, traceback, pickle and class names."""
    return m.Error(type(exc).__qualname__, str(exc), tb, pickle_error(exc), error_types(exc))


def too_large(what: str, value: Any, size: int, instead: str) -> str:
    """The error for a value whose frame would pass the channel's limit (nothing was sent)."""
    return (
        f"{what} ({type(value).__qualname__}) is {size} bytes encoded, more than the "
        f"{framing.MAX_FRAME} bytes a unit's channel carries: write it to a file and "
        f"{instead} the file's path"
    )


def pickle_error(exc: BaseException) -> bytes | None:
    try:
        return bytes(cloudpickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception that does not pickle is reported as text
        return None
