"""SupervisorActor: owns the registry, the kinds table, the mailboxes and the deadlines.

It is made of parts, each taking what it uses in its constructor:

- ``Units``: the registry, one slot per unit, the change events;
- ``LedgerMirror``: what is written to the ledger, and reads that outlive memory;
- ``Starts``: the registration chokepoint, queues per kind, starting;
- ``TerminalTransition``: ending (memory, then the ledger, then everyone else);
- ``UnitControl``: kill, cancel, stop, shed, deadlines, retention, output reads;
- ``Notices`` and ``UnitMessaging``: parents' notices, teammates' messages;
- ``ChildRequests`` and ``Recovery``: what units' processes and the ledger bring in;
- ``Retries``, ``Reruns`` and ``Activity``: failed attempts run again, ``retry(id)``,
  stamped progress and stalls;
- ``Signals``: outside input that units wait for.

Every method runs in this actor's thread (pykka), so none of it needs locks.
It never asks another actor anything: WorkActors, the Reaper and the Ticker
talk to it with messages it does not answer (``ticker``), and it answers only
the facade's ``Request`` asks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from workunits._core.clock import Clock
from workunits._core.errors import LedgerError, LedgerGone, SessionLost, WorkunitsError
from workunits._core.record import Outcome, WorkRecord
from workunits._core.status import Reason, Status
from workunits._ledger import Ledger
from workunits._pool import WorkerPool
from workunits._sandbox.isolation import Isolation
from workunits._wire.actor_messages import (
    Answered,
    CheckpointReport,
    ChildNoticeTaken,
    ControlChild,
    MonitorEventReport,
    ProgressReport,
    SendFromUnit,
    SpawnChild,
)
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper
from workunits.actors.kind_code import contained
from workunits.actors.warm_files import WarmFiles
from workunits.supervisor.actor import pages
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.activity import Activity
from workunits.supervisor.actor.children import ChildRequests
from workunits.supervisor.actor.control import UnitControl
from workunits.supervisor.actor.deadlines import Deadlines
from workunits.supervisor.actor.endings import (
    EndReport,
    EndReports,
    FlushEnds,
    TerminalTransition,
)
from workunits.supervisor.actor.eviction import DEFAULT_MAX_RESIDENT_ENDED, Eviction
from workunits.supervisor.actor.kinds import Kinds
from workunits.supervisor.actor.ledger_mirror import LedgerMirror
from workunits.supervisor.actor.messaging import UnitMessaging
from workunits.supervisor.actor.notices import Acknowledged, Notices, RedeliverChildNotices
from workunits.supervisor.actor.output import OutputReads
from workunits.supervisor.actor.pids import Pids
from workunits.supervisor.actor.recovery import Recovery
from workunits.supervisor.actor.rerun import Reruns
from workunits.supervisor.actor.retries import Retries
from workunits.supervisor.actor.schedules import Schedules
from workunits.supervisor.actor.signals import Signals
from workunits.supervisor.actor.starts import Starts, Surroundings
from workunits.supervisor.actor.submits import FlushSubmits, GroupedSubmits
from workunits.supervisor.actor.tracing import UnitSpans
from workunits.supervisor.actor.units import Units

log = logging.getLogger(__name__)

OUTBOX_TRIM_EVERY = 60.0  # seconds between deletions of acknowledged notices


@dataclass(frozen=True, slots=True)
class Tick:
    """From the Ticker, every tick interval: deadlines, the sweep and the ledger's
    periodic duties (``ticker``)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """From the ledger's listener (PostgreSQL): a request, signal or pending unit was added.

    Applied at once instead of at the next tick; the tick still polls, so a
    wake-up lost on the way costs only latency.
    """


class SupervisorActor(pykka.ThreadingActor):
    use_daemon_thread = True  # a safety net only; Supervisor.close() stops it

    def __init__(
        self,
        *,
        state_dir: Path,
        output_dir: Path,
        clock: Clock,
        reaper: Reaper,
        zygote: ZygoteClient,
        kinds: Kinds,
        eviction_grace: float,
        ledger: Ledger,
        session: str,
        concurrency: Mapping[str, int] | None = None,
        tracer_provider: Any = None,
        max_resident_ended: int = DEFAULT_MAX_RESIDENT_ENDED,
        pool: WorkerPool | None = None,
        files: WarmFiles | None = None,
        session_lease: float | None = None,
        shared_ledger: bool = False,
        on_session_lost: Callable[[], None] | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._closing = False
        # Our session was taken over (its lease lapsed): see _lose_session.
        self._session_lost = False
        self._ledger_gone = False  # said once (``_check_ledger_in_place``)
        self._on_session_lost = on_session_lost
        deadlines = Deadlines()
        self._mirror = LedgerMirror(ledger, session, clock, lease=session_lease)
        self._units = units = Units(kinds, self._mirror)
        self._notices = Notices(units, ledger, clock, tell_self=self.actor_ref.tell)
        self._eviction = Eviction(
            units=units,
            notices=self._notices,
            ledger=ledger,
            deadlines=deadlines,
            clock=clock,
            max_resident=max_resident_ended,
        )
        self._output = OutputReads(units, ledger)
        self._next_outbox_trim = 0.0
        self._messaging = UnitMessaging(units, self._notices)
        self._endings = TerminalTransition(
            units=units,
            mirror=self._mirror,
            notices=self._notices,
            deadlines=deadlines,
            clock=clock,
            eviction_grace=eviction_grace,
            fail_asks=self._messaging.fail_asks,
            kill_children=self._kill_children,
            cascade=self._cascade,
            tell_self=self.actor_ref.tell,
            idle=self.actor_inbox.empty,
        )
        self._pids = Pids()
        around = Surroundings(
            state_dir,
            output_dir,
            clock,
            reaper,
            zygote,
            self.actor_ref.tell,
            self._pids.report,
            pool,
            files,
            isolation,
        )
        self._starts = Starts(
            units=units,
            mirror=self._mirror,
            endings=self._endings,
            deadlines=deadlines,
            around=around,
            concurrency=concurrency,
        )
        self._submits = GroupedSubmits(
            self._starts, idle=self.actor_inbox.empty, tell_self=self.actor_ref.tell
        )
        # A span per unit when traces are asked for; None (nothing imported) otherwise.
        self._spans = UnitSpans.start(ledger, tracer_provider)
        if self._spans is not None:
            units.subscribe(self._spans.on_change)
            self._submits.spans = self._starts.spans = self._spans
        self._control = UnitControl(
            units=units,
            endings=self._endings,
            eviction=self._eviction,
            deadlines=deadlines,
            clock=clock,
            eviction_grace=eviction_grace,
        )
        self._retries = Retries(
            units=units,
            starts=self._starts,
            ledger=ledger,
            session=session,
            clock=clock,
            restarting=self._messaging.restarting,
            restarted=self._messaging.restarted,
        )
        self._reruns = Reruns(units=units, starts=self._starts, ledger=ledger)
        self._activity = Activity(units=units, notices=self._notices, clock=clock)
        self._signals = Signals(units=units, ledger=ledger)
        self._children = ChildRequests(
            units=units,
            starts=self._starts,
            control=self._control,
            output=self._output,
            reruns=self._reruns,
            signals=self._signals,
            submit_many=self._submits.submit_many,
        )
        self._schedules = Schedules(
            ledger=ledger, register=self._starts.register_written, started_at=clock.now()
        )
        self._recovery = Recovery(
            ledger=ledger,
            mirror=self._mirror,
            session=session,
            clock=clock,
            units=units,
            starts=self._starts,
            control=self._control,
            adopt_waiting=self._retries.adopt_waiting,
            adopt_lost=self._retries.adopt_lost,
            lease=session_lease,
            shared=shared_ledger,
        )

    # -- pykka hooks -------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        """Every message: the facade's asks (``Request``) and everyone's tells.

        Ends not yet committed are committed before anything else is handled,
        so no message sees an end that is not durable (see ``supervisor.actor.endings``);
        the facade's submits are committed in groups likewise (``supervisor.actor.submits``).
        Then the pids reported since the last message are applied, so none of
        them is behind it (``supervisor.actor.pids``). The ``running`` writes of the
        units started while one message is handled land together at its end.
        """
        # The starts this message makes (those its ends let go, say) share one commit.
        with self._mirror.grouping_status():
            if self._endings.pending and not isinstance(
                message, EndReport | EndReports | FlushEnds
            ):
                self._endings.commit()
            if self._submits.pending and not isinstance(message, rq.Register | FlushSubmits):
                self._submits.commit()  # the same for submits (``supervisor.actor.submits``)
            self._pids.apply(self._units)
            self._receive(message)
        return None

    def _receive(self, message: Any) -> None:
        """``on_receive``'s handling of one message, after the commits it owes."""
        try:
            if isinstance(message, rq.Register):
                self._submits.add(message)  # answered once its group's commit is durable
            elif isinstance(message, rq.Request):
                # Asked: an exception belongs to the asker, and pykka hands it over.
                self._answer(message)
            else:
                self._handle_tell(message)
        except BaseException as exc:
            # The last line of invariant 14, behind ``kind_code``'s at each call into a
            # kind: pykka's loop would stop every actor for what is not an Exception
            # (user code this thread ran: a spec's own methods, say).
            fault = contained(exc, None, f"handling {type(message).__name__}")
            if isinstance(message, rq.Request):
                if fault is exc:
                    raise
                raise fault from exc
            # Told: a bad message must never stop the supervisor; log it and go on.
            log.exception("supervisor: failed to handle %r", message)

    def on_stop(self) -> None:
        """In this actor's thread, after the last message: commit, then close."""
        self._submits.drop()  # nothing of it was written, nor started
        self._endings.commit()
        if self._spans is not None:
            self._spans.close(handed_over=True)
        self._save_read_offsets()
        self._mirror.close()
        self._messaging.fail_all_asks()
        for _, slot in self._units.slots():
            if slot.read_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(slot.read_fd)
                slot.read_fd = None
        self._notices.close()

    def _save_read_offsets(self) -> None:
        """At stop, where each resident unit's reader stopped: the next supervisor's
        ``read_output`` carries on from there, as it does after an eviction."""
        offsets = [(r.id, r.output_offset) for r in self._units.registry if r.output_offset]
        if not offsets:
            return
        try:
            self._mirror.ledger.units.save_output_offsets(offsets)
        except WorkunitsError:  # a read offset: the reader sees bytes again, nothing is lost
            log.exception("ledger: could not keep %d units' read offsets", len(offsets))

    # -- tells from WorkActors, the Reaper, the Ticker and mailboxes ----------------

    def _handle_tell(self, message: object) -> None:  # noqa: PLR0912 - a case each
        match message:
            case EndReport(work_id, reported):
                end = self._taken_end(work_id, reported)
                if end is not None:
                    self._endings.report(work_id, end)
            case EndReports(reports):
                ends = [(r.work_id, self._taken_end(r.work_id, r.outcome)) for r in reports]
                self._endings.report_group([(w, end) for w, end in ends if end is not None])
            case FlushEnds():
                self._endings.flush()
            case FlushSubmits():
                self._submits.flush()
            case ProgressReport(work_id, fraction, text, evidence):
                self._activity.progress(work_id, fraction, text, evidence)
            case CheckpointReport(work_id, attempt, state, consumed):
                self._mirror.save_checkpoint(work_id, attempt, state, consumed)
                self._activity.saw(work_id)
                self._units.tell_checkpoint(work_id, attempt, state)
            case RedeliverChildNotices(parent):
                self._notices.redeliver(parent)
            case ChildNoticeTaken(work_id, status):
                self._mirror.mark_delivered(work_id, Status(status))
                self._eviction.acknowledged(work_id)
            case Acknowledged(notice, in_ledger):
                if not in_ledger:
                    self._mirror.mark_delivered(notice.id, notice.status)
                self._eviction.acknowledged(notice.id)
            case SpawnChild(parent, request, route):
                self._children.spawn(parent, request, route)
            case ControlChild(parent, request, None) if request.op == "signals":
                self._signals.opened(parent, request.req)
            case ControlChild(parent, request, route):
                self._children.control(parent, request, route)
            case SendFromUnit() | Answered() | MonitorEventReport():
                self._messaging.between_units(message)
            case Tick():
                self._tick()
            case Wake():
                self._woken()
            case _:
                log.warning("supervisor: unexpected message %r", message)

    # -- the facade's asks -------------------------------------------------------------

    def _answer(self, request: rq.Request[Any]) -> None:
        """Reads and teammates' messages; every other request in ``_answer_change``."""
        units, control = self._units, self._control
        match request:
            case rq.Get(work_id):
                request.answer(self._mirror.marked(units.get(work_id)))
            case rq.ListUnits(query):
                request.answer([self._mirror.marked(r) for r in pages.page(units, query)])
            case rq.ReadOutput(work_id, max_bytes):
                request.answer(self._output.read(work_id, max_bytes))
            case rq.ReadChunk(work_id, offset, max_bytes):
                request.answer(self._output.chunk(work_id, offset, max_bytes))
            case rq.ResidentIds():
                request.answer({r.id for r in units.registry})
            case rq.MailboxOf(owner):
                request.answer(self._notices.mailbox(owner))
            case rq.UnitActor(work_id):
                request.answer(control.unit_actor(work_id))
            case rq.SendToTeammate(target, message, ask, reply):
                request.answer(self._messaging.send(target, message, ask=ask, reply=reply))
            case rq.ForgetAsk(target, token):
                self._messaging.forget_ask(target, token)
                request.answer(None)
            case _:
                self._answer_change(request)

    def _answer_change(self, request: rq.Request[Any]) -> None:  # noqa: PLR0912, PLR0915 - a case each
        units, control = self._units, self._control
        match request:
            case rq.RetryUnit(work_id):
                request.answer(self._reruns.retry(work_id))
            case rq.SignalUnit(work_id, name, value):
                request.answer(self._signals.send(work_id, name, value))
            case rq.SendInput(work_id, data, eof):
                request.answer(control.send_input(work_id, data, eof))
            case rq.AddSchedule(name, cron, letter, spec, tz, catch_up, options):
                self._schedules.add(
                    name,
                    cron,
                    letter,
                    spec,
                    tz=tz,
                    catch_up=catch_up,
                    options=options,
                    now=self._clock.now(),
                )
                request.answer(None)
            case rq.RemoveSchedule(name):
                request.answer(self._schedules.remove(name))
            case rq.ListSchedules():
                request.answer(self._mirror.ledger.schedules.listing())
            case rq.RegisterKind(letter, actor_class):
                units.kinds.add(letter, actor_class)
                request.answer(None)
            case rq.Recover():
                request.answer(self._recovery.recover())
            case rq.Subscribe(subscriber):
                units.subscribe(subscriber)
                request.answer(None)
            case rq.SubscribeStops(stop_subscriber):
                units.subscribe_stops(stop_subscriber)
                request.answer(None)
            case rq.SubscribeCheckpoints(checkpoint_subscriber):
                units.subscribe_checkpoints(checkpoint_subscriber)
                request.answer(None)
            case rq.Update(work_id, change):
                request.answer(units.write(work_id, change)[1])
            case rq.RetainUnit(work_id):
                request.answer(control.retain(work_id))
            case rq.Release(work_id):
                request.answer(control.release(work_id))
            case rq.TakeLease(work_id, lease):
                units.get(work_id)  # InvalidWorkId / UnknownWork now, not a stray lease
                request.answer(self._mirror.ledger.retains.add(work_id, lease))
            case rq.RenewLease(lease_id, lease):
                request.answer(self._mirror.ledger.retains.renew(lease_id, lease))
            case rq.EndLease(work_id, lease_id):
                ended = self._mirror.ledger.retains.release(lease_id)
                self._eviction.released(work_id)
                request.answer(ended)
            case rq.SubmitMany():
                request.answer(self._submits.submit_many(request))
            case rq.WithdrawPending(work_ids):
                request.answer(control.withdraw_pending(work_ids))
            case rq.KillUnit(work_id, reason):
                request.answer(control.kill(work_id, reason))
            case rq.CancelUnit(work_id, grace, reason):
                request.answer(control.cancel(work_id, grace, reason))
            case rq.Shed(n):
                request.answer(control.shed(n))
            case rq.TickNow():
                request.answer(self._tick())
            case rq.Gc(older_than):
                request.answer(self._mirror.ledger.retention.gc(older_than))
            case rq.StopTeammateUnit(work_id):
                request.answer(control.stop_teammate(work_id))
            case rq.Drain():
                self._starts.refuse_new_work()
                request.answer(control.unresumable_running(self._mirror.resumable))
            case rq.BeginShutdown(deploy, grace):
                self._closing = True
                self._starts.refuse_new_work()
                ending = control.begin_shutdown(
                    deploy=deploy, resumable=self._mirror.resumable, grace=grace
                )
                request.answer(ending)
            case rq.ForceEnd(work_ids, error):
                control.force_end(work_ids, error)
                request.answer(None)
            case _:
                raise TypeError(f"the supervisor has no answer to {request!r}")

    # -- what the parts leave to the whole ---------------------------------------------

    def _tick(self) -> int:
        """Deadlines; other processes' requests before anything starts; then the ledger's duties.

        Requests first: a cancel sent for a queued unit wins over the start that
        an end landing now, a retry's next attempt, or an adopted submit would give it.
        """
        now = self._clock.now()
        evicted = self._control.run_deadlines(now)
        self._check_ledger_in_place()
        if self._session_lost:
            self._mirror.retry()  # lets go of what was queued (SessionLost is for good)
            return evicted
        if not self._closing:
            self._recovery.apply_requests()
        self._mirror.retry()  # also while closing: the ends that land then are told
        if not self._closing:
            self._retries.tick()
            self._starts.start_due()
            self._activity.tick()
            self._mirror.flush_grouped()
            self._recovery.tick()
            self._signals.tick()
            self._schedules.tick(now)
            try:
                if self._recovery.recovered:  # a tick may come before the session row exists
                    self._control.expired(self._mirror.periodic(now), now)
            except SessionLost as exc:
                self._lose_session(exc)
                return evicted
            if now >= self._next_outbox_trim:
                # Acknowledged notices are kept a while (a consumer may look again),
                # then deleted: the outbox stays as small as what is unread.
                self._next_outbox_trim = now + OUTBOX_TRIM_EVERY
                try:
                    self._mirror.ledger.outbox.drop_acknowledged(older_than=OUTBOX_TRIM_EVERY)
                except LedgerError as exc:  # tried again at its next time
                    self._mirror.backlog.report(exc, "the outbox trim", kept=False)
        return evicted

    def _check_ledger_in_place(self) -> None:
        """Each tick: the ledger's files where they were (invariant 16)? Said once when not;
        from then on submits raise LedgerGone and every write is held in memory."""
        try:
            self._mirror.ledger.check_in_place()
        except LedgerGone as exc:
            if not self._ledger_gone:
                self._ledger_gone = True
                log.error("supervisor: LEDGER GONE: %s", exc)  # noqa: TRY400 - the message is the cause

    def _lose_session(self, exc: SessionLost) -> None:
        """Our lease lapsed (we were stopped, or cut off) and another supervisor took
        our session over: it owns our units now, resumed as their next attempt or
        ended ``lost``, and the ledger refuses every write of ours (fencing).

        What a serious runtime does on losing its lease is stop acting on state
        that is no longer its own, at once, and stop, as a process that lost its
        leader lease does: this one's registry, queues and mailboxes describe
        units owned elsewhere now, and opening a fresh session in the same
        process would mean rebuilding all of it while the old unit processes
        die. So: every unit process here is killed without an end being
        recorded (their slots are ``suspended``, as in a deploy: no terminal
        write, no notice; the ledger's rows are the new owner's), nothing more
        starts or is claimed, the ticks leave the ledger alone, and the owner
        is told (``on_session_lost``: ``workunits serve`` exits with
        EXIT_SESSION_LOST so its process manager starts a fresh supervisor,
        with a fresh session). In the actor's thread.
        """
        if self._session_lost:
            return
        self._session_lost = True
        log.error(
            "supervisor: SESSION LOST: %s. Killing this supervisor's %d unit process(es) "
            "without recording their ends (their new owner resumes or fails them) and "
            "starting nothing more; start a new supervisor",
            exc,
            sum(1 for r in self._units.registry if r.status == Status.RUNNING),
        )
        self._starts.refuse_new_work()
        for record in list(self._units.registry):
            slot = self._units.slot(record.id)
            if slot is None or record.status not in (Status.PENDING, Status.RUNNING):
                continue
            slot.suspended = True
            try:
                self._control.kill_resident(record.id, Reason.SHUTDOWN)
            except Exception:  # one unit's failure must not keep the others alive
                log.exception("supervisor: could not kill %s after the session loss", record.id)
        if self._on_session_lost is not None:
            try:
                self._on_session_lost()
            except Exception:
                log.exception("supervisor: on_session_lost raised")

    def _woken(self) -> None:
        """What another process added: requests first, as a tick orders them, then the rest."""
        if self._closing or self._session_lost:
            return
        self._recovery.apply_requests()
        self._recovery.tick()
        self._signals.tick()

    def _kill_children(self, ended: WorkRecord) -> None:
        for child in self._units.registry.children(ended.id):
            self._control.kill_resident(child, Reason.PARENT_ENDED)

    def _taken_end(self, work_id: str, reported: object) -> Outcome | None:
        """A reported end as the supervisor takes it: a kind's bug fails the unit, a
        kill or cancel asked of it says so, and a retry policy may take it (None)."""
        outcome = self._endings.checked(work_id, reported)
        return self._retries.intercept(work_id, self._control.as_asked(work_id, outcome))

    def _cascade(self, ended: WorkRecord) -> None:
        """After an end is durable and told: its children are killed, a queued unit starts."""
        self._eviction.ended(ended)
        self._kill_children(ended)
        self._starts.ended(ended)
