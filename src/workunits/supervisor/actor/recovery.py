"""``Recovery``: what the ledger brings in -- dead sessions' units, other processes' work.

Owned by the SupervisorActor; every method runs in its thread. Other processes
insert pending units (``wu.connect().shell(...)``) and append requests
(cancel, kill, retain, release); the supervisor adopts and applies them on its
ticks. At start, running units of dead sessions are resumed (same ID, next
attempt, last checkpoint) when their kind says they can be, else they fail
with reason ``lost``.

Several supervisors on one (PostgreSQL) ledger (``shared``): each holds its
session as a lease (renewed by its heartbeat, ``LedgerMirror.periodic``). At
start and every TAKEOVER_EVERY seconds of ticks, a supervisor takes over the
sessions whose lease lapsed (``Sessions.take_over``: exactly one supervisor wins
each) and recovers their running units as above; their pending units go back
to the cluster. Pending units nobody owns are claimed (``Claims.claim``),
no more of a kind than this supervisor has free slots for, so each is started
by exactly one supervisor. Alone on a SQLite ledger (its lock held), every
other session is dead at start, and none can lapse afterwards.

Requests first: at start, every queued request is applied before any unit is
resumed or started, so a cancel sent while no supervisor ran ends its unit
``killed`` instead of racing its next attempt; at every tick, requests are
applied (``apply_requests``) before anything new starts.

A ledger failure worth retrying (a full disk, a lock held too long) loses
nothing here either (invariant 14): a request that could not be applied is
held and applied first at the next tick, a dead session's unit that could not
be resumed is tried again at the next tick (unless a held cancel or kill is
about it), and a pending unit that could not be adopted is adopted later.

A write whose COMMIT lost its answer is settled by reading back (``_ledger.settle``);
when even that could not reach the ledger, what landed is found by a rescan every
RESCAN_EVERY seconds: units this session owns that memory lacks are adopted or
resumed, and pending units claimed by no live session go back to the queue.

A row changed outside workunits stops nothing but its own unit (``unreadable``):
one that does not decode is left as it is, neither resumed nor started nor
ended, and logged once at ERROR with what is wrong and how to repair it; a
later supervisor finds it again. One whose stored value (a checkpoint, a
value file) fails its check fails ``lost`` with that error, as a unit whose
spec fails its check does. Every other unit is resumed, adopted and run.
"""

from __future__ import annotations

import base64
import logging
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from workunits._core.clock import Clock
from workunits._core.errors import (
    LedgerCorrupt,
    LedgerError,
    SpecError,
    UnknownKind,
    WorkunitsError,
)
from workunits._core.record import Outcome, replace
from workunits._core.retry import counted
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import Ledger, LedgerRequest, UnitRow, Write, unreadable
from workunits._ledger.requests import END_VERBS
from workunits._ledger.unreadable import Unreadable
from workunits._util import outputfile
from workunits.actors.kind_code import call_kind
from workunits.supervisor.actor.control import UnitControl
from workunits.supervisor.actor.failed_writes import retryable
from workunits.supervisor.actor.ledger_mirror import LedgerMirror
from workunits.supervisor.actor.starts import Starts
from workunits.supervisor.actor.units import Units

log = logging.getLogger(__name__)
# A request applied at a later tick, its place in the order kept (compared by identity).
_LATER: dict[str, Any] = {"later": True}

ADOPT_BATCH = 256
TAKEOVER_EVERY = 1.0  # seconds between looks for lapsed sessions (shared ledgers)
# Seconds between looks for units the ledger gives this session that memory lacks (_rescan).
RESCAN_EVERY = 5.0
LOST_TRACK = (
    "lost: its supervisor lost track of it (a ledger write whose answer was lost, and "
    "could not be read back in time)"
)
REQUESTS_PER_TICK = 64


class Recovery:
    def __init__(
        self,
        *,
        ledger: Ledger,
        mirror: LedgerMirror,
        session: str,
        clock: Clock,
        units: Units,
        starts: Starts,
        control: UnitControl,
        adopt_waiting: Callable[[UnitRow], bool] | None = None,
        adopt_lost: Callable[[UnitRow], Outcome | None] | None = None,
        lease: float | None = None,
        shared: bool = False,
    ) -> None:
        self._ledger = ledger
        self._session = session
        self._clock = clock
        self._units = units
        self._starts = starts
        self._control = control
        # A unit its dead session left waiting between attempts continues its
        # retry schedule here (``supervisor.actor.retries``); False: it is lost.
        self._adopt_waiting = adopt_waiting
        self._mirror = mirror
        self._recovered = False  # recover() has run: ticks before it leave the ledger alone
        # Requests taken but not applied: the ledger failed (retried first, in order).
        self._held: deque[LedgerRequest] = deque()
        # Units of dead sessions whose resume the ledger failed: tried again each tick.
        self._left: set[str] = set()
        # A teammate with a restart policy lost while it ran is restarted by its
        # policy (``supervisor.actor.retries``); otherwise the end to record.
        self._adopt_lost = adopt_lost
        # The session's lease (None: the ledger's default); ``shared``: other
        # supervisors may use this ledger at once, so sessions lapse by lease.
        self._lease = lease
        self._shared = shared
        self._next_takeover = 0.0
        self._next_rescan = 0.0
        # Claimed, not yet started (the ledger failed); an Unreadable here is read again.
        self._claimed: list[UnitRow | Unreadable] = []
        # Claimed pending units of kinds not registered (yet): started when they are.
        self._parked: dict[str, UnitRow | Unreadable] = {}

    @property
    def recovered(self) -> bool:
        """The session is open (``recover`` has run): its heartbeat has a row to renew."""
        return self._recovered

    def recover(self) -> dict[str, list[str]]:
        """Open the session; apply requests; resume or fail what dead sessions left; adopt."""
        self._ledger.sessions.open(self._session, os.getpid(), lease=self._lease)
        if self._shared:
            # From here on every write checks this session was not taken over (fence).
            # A ledger of our own (SQLite, its state dir's lock held) needs no check:
            # only a supervisor holding that lock can take this session over, and it
            # cannot get the lock while we live. That is two queries less per unit.
            self._ledger.fence(self._session)
        self._ledger.requests.reopen(self._session)
        self._recovered = True
        # Before anything is resumed or started: a cancel sent while no supervisor
        # ran ends its unit without another attempt (DESIGN §4).
        self._apply_requests(until_none_left=True)
        resumed, lost = self._take_over(exclusive=not self._shared)
        adopted = self._adopt_pending()
        self._next_rescan = self._clock.now() + RESCAN_EVERY
        return {"resumed": resumed, "lost": lost, "adopted": adopted}

    def _take_over(self, *, exclusive: bool) -> tuple[list[str], list[str]]:
        """Take over dead sessions; resume or fail their running units."""
        self._next_takeover = self._clock.now() + TAKEOVER_EVERY
        won, rows = self._ledger.sessions.take_over(self._session, exclusive=exclusive)
        if won and self._shared:
            log.warning(
                "session %s took over session(s) %s (lease lapsed): %d running unit(s) to "
                "resume or fail, their pending units back to the cluster",
                self._session,
                ", ".join(won),
                len(rows),
            )
        resumed: list[str] = []
        lost: list[str] = []
        for row in rows:
            if isinstance(row, Unreadable):
                outcome = self._take_unreadable(row)
            else:
                outcome = self._resume_or_lose(row)
            if outcome is not None:
                (resumed if outcome else lost).append(row.id)
        return resumed, lost

    def _take_unreadable(self, bad: Unreadable) -> bool | None:
        """A dead session's unit whose row cannot be read: False once failed ``lost``,
        None when it is left as it is (or tried again at the next tick)."""
        if bad.row is None:
            unreadable.report(bad, logging.ERROR, "is left as it is, not resumed")
            return None
        if retryable(bad.error):
            self._left.add(bad.id)
            what = f"the resume of {bad.id} (tried again)"
            self._mirror.backlog.report(bad.error, what, kept=False)
            return None
        unreadable.report(bad, logging.ERROR, "cannot be resumed and fails lost")
        self._lose(bad.row, f"lost: could not resume it: {type(bad.error).__name__}: {bad.error}")
        return False

    def apply_requests(self) -> None:
        """Every tick, before anything starts: apply other processes' requests."""
        if self._recovered:
            self._apply_requests()

    def tick(self) -> None:
        """After the requests: resume what the ledger failed to, adopt what others submitted."""
        if not self._recovered:
            return
        try:
            now = self._clock.now()
            if self._shared and now >= self._next_takeover:
                self._take_over(exclusive=False)
            if now >= self._next_rescan:
                self._next_rescan = now + RESCAN_EVERY
                self._rescan()
            self._resume_left()
            self._adopt_pending()
        except LedgerError as exc:
            self._mirror.backlog.report(exc, "pending units (adopted at a later tick)", kept=False)

    def _rescan(self) -> None:
        """Find what the ledger says is ours but memory does not hold, and what nobody holds.

        A write whose COMMIT lost its answer, and that could not be read back in
        time, may have landed: a submit that started its unit (``running``, ours),
        a claim, a takeover. Such a unit is in no memory, and nothing else would
        ever look for it. So every RESCAN_EVERY seconds: pending units claimed by
        no live session go back to the queue (``claims.release_unheld``); of the
        units this session owns, a pending one not in memory is adopted, and a
        running one is resumed as its next attempt (the one it had is logged
        ``lost``) or fails ``lost``.
        """
        released = self._ledger.claims.release_unheld(self._session, exclusive=not self._shared)
        if released:
            log.warning(
                "%d pending unit(s) claimed by no live session went back to the queue: %s",
                len(released),
                ", ".join(released[:10]),
            )
        known = {r.id for r in self._claimed} | set(self._parked) | self._left
        for work_id, status in self._ledger.sessions.held_by(self._session):
            if work_id in self._units or work_id in known or self._mirror.backlog.holds(work_id):
                continue
            row = self._ledger.units.get(work_id)
            if row is None or row.session != self._session or row.status != status:
                continue  # it moved on since the look
            log.warning(
                "unit %s is this session's in the ledger (%s) but was not in memory (a "
                "write whose answer was lost): %s",
                work_id,
                status.value,
                "adopted" if status == Status.PENDING else "resumed, or failed lost",
            )
            if status == Status.PENDING:
                self._claimed.append(row)
            else:
                self._resume_or_lose(row, why=LOST_TRACK)

    def _resume_or_lose(self, row: UnitRow, why: str | None = None) -> bool | None:
        """Resume (True) or fail ``lost`` (False); None to try again at the next tick.

        ``why``: the lost attempt's error, when it is not that its supervisor ended."""
        if self._held_end_for(row.id):
            self._left.add(row.id)  # its cancel or kill is applied first
            return None
        try:
            # What a next attempt resumes from: refused here, naming the unit and the
            # column, rather than as a bare JSON error from a process started for it.
            row.last_checkpoint()
        except LedgerCorrupt as exc:
            unreadable.report(Unreadable(row.id, exc, row), logging.ERROR, "fails lost")
            self._lose(row, f"lost: could not resume it: {type(exc).__name__}: {exc}")
            return False
        if row.retry_at is not None and self._adopt_waiting is not None:
            if self._adopt_waiting(row):
                return True
            self._lose(row, "lost: its retries could not be continued after its supervisor ended")
            return False
        if (
            row.restart is not None
            and self._adopt_lost is not None
            and row.status == Status.RUNNING
        ):
            end = self._adopt_lost(row)
            if end is None:
                return True
            self._lose(row, end.error or "lost", end.reason or Reason.LOST)
            return False
        try:
            actor_class = self._units.kinds.actor_class(row.id[0])
            durable = self._ledger.units.load_spec(row.id)
            # Attempts handed over at a deploy count as no failure (invariant 13).
            if row.resumable and counted(row.attempt, row.attempts) < row.max_attempts:
                spec, timeout = call_kind(actor_class, actor_class.from_durable, durable)
                # The attempt it had is in its log now (lost, or handed over).
                attempt, attempts = self._ledger.attempts.resumed(
                    row.id, self._session, expected=row.attempt, why=why
                )
                record = replace(
                    row.to_record(),
                    status=Status.PENDING,
                    attempt=attempt,
                    attempts=attempts,
                    pid=None,
                )
                self._starts.admit(record, actor_class, spec, timeout, row.checkpoint, adopted=True)
                return True
            error = why or f"lost: its supervisor (session {row.session}) ended while it ran"
            if row.resumable:
                error += f"; all {row.max_attempts} attempts are used (deploys not counted)"
        except (WorkunitsError, UnknownKind) as exc:
            if retryable(exc):
                self._left.add(row.id)
                what = f"the resume of {row.id} (tried again)"
                self._mirror.backlog.report(exc, what, kept=False)
                return None
            error = f"lost: could not resume it: {type(exc).__name__}: {exc}"
        self._lose(row, error)
        return False

    def _resume_left(self) -> None:
        for work_id in sorted(self._left):
            self._left.discard(work_id)
            try:
                row = self._ledger.units.get(work_id)
            except LedgerError as exc:
                if retryable(exc):
                    self._left.add(work_id)
                    what = f"the resume of {work_id} (tried again)"
                    self._mirror.backlog.report(exc, what, kept=False)
                else:  # damaged since it was taken over: left for a repair
                    unreadable.report(
                        Unreadable(work_id, exc), logging.ERROR, "is left as it is, not resumed"
                    )
                continue
            if (
                row is not None
                and row.status == Status.RUNNING
                and row.session == self._session  # taken over: ours, not in memory
                and work_id not in self._units
                and not self._mirror.backlog.holds(work_id)
            ):
                self._resume_or_lose(row)

    def _held_end_for(self, work_id: str) -> bool:
        return any(r.target == work_id and r.verb in END_VERBS for r in self._held)

    def _lose(self, row: UnitRow, error: str, reason: Reason = Reason.LOST) -> None:
        failed = Write(
            row.id,
            row.attempt,
            {
                "status": Status.FAILED.value,
                "reason": reason.value,
                "error": error,
                "ended_at": self._clock.now(),
                **_final_output(row),
            },
        )
        # pending -> failed is no transition (only a cancel ends a pending unit): a
        # pending unit that cannot start passes through running, in one transaction,
        # as a unit whose launch fails does. Without it the write was refused, and
        # the unit stayed pending, retried and refused again at every tick.
        batch = [failed]
        if row.status == Status.PENDING:
            batch.insert(0, Write(row.id, row.attempt, {"status": Status.RUNNING.value}))
        self._mirror.write_lost(row.id, batch)

    def _adopt_pending(self) -> list[str]:
        """Claim and start pending units other processes submitted (or a dead session left)."""
        free = self._starts.free_slots()
        if free is None:
            return []  # closing: nothing more starts here
        adopted: list[str] = []
        # Claimed at an earlier tick, but the ledger failed before they started; and
        # those of a kind that is registered now.
        rows, self._claimed = self._claimed, []
        rows += self._kind_registered()
        rows += self._ledger.claims.claim(self._session, free, ADOPT_BATCH)
        for i, item in enumerate(rows):
            if item.id in self._units or self._mirror.backlog.holds(item.id):
                continue  # in memory, or its lost end is waiting to be written
            if item.id[0] not in self._units.kinds:
                self._park(item)
                continue
            if isinstance(item, Unreadable):
                if item.row is None:
                    # Claimed (out of the queue), and otherwise left as it is for a repair.
                    unreadable.report(item, logging.ERROR, "is left as it is, not started")
                    continue
                bare = item.row
                if not retryable(item.error):
                    unreadable.report(item, logging.ERROR, "cannot be started and fails")
                    self._lose(bare, f"could not start: {type(item.error).__name__}: {item.error}")
                    continue
            else:
                bare = item
            try:
                # An Unreadable for the ledger's moment is read again: it may pass now.
                row = item if isinstance(item, UnitRow) else self._ledger.units.require(item.id)
                actor_class = self._units.kinds.actor_class(row.id[0])
                spec, timeout = call_kind(
                    actor_class, actor_class.from_durable, self._ledger.units.load_spec(row.id)
                )
                record = self._starts.with_policy(row.to_record(), actor_class, spec)
            except (WorkunitsError, UnknownKind) as exc:
                if retryable(exc):  # not the unit's fault: adopted at a later tick
                    what = f"the adoption of {bare.id} (tried again)"
                    self._mirror.backlog.report(exc, what, kept=False)
                    self._claimed = rows[i:]  # claimed already: no one else starts them
                    break
                self._lose(bare, f"could not start: {type(exc).__name__}: {exc}")
                continue
            self._starts.admit(record, actor_class, spec, timeout, row.checkpoint, adopted=True)
            adopted.append(row.id)
        return adopted

    def _park(self, item: UnitRow | Unreadable) -> None:
        """A pending unit of a kind this supervisor has not registered: kept claimed
        and pending (nothing is lost), and started once the kind is registered
        (``register_kind``); a later supervisor that has the kind takes it over."""
        if item.id not in self._parked:
            log.warning(
                "unit %s is of kind %r, which this supervisor has no kind for: it stays "
                "pending until the kind is registered (Supervisor(kinds=...) or "
                "register_kind)",
                item.id,
                item.id[0],
            )
        self._parked[item.id] = item

    def _kind_registered(self) -> list[UnitRow | Unreadable]:
        """Parked units whose kind is registered now, read again: a cancel may have
        ended one meanwhile."""
        ready: list[UnitRow | Unreadable] = []
        for work_id in [w for w in self._parked if w[0] in self._units.kinds]:
            del self._parked[work_id]
            row = self._ledger.units.get(work_id)
            if row is not None and row.status == Status.PENDING:
                ready.append(row)
        return ready

    def _apply_requests(self, *, until_none_left: bool = False) -> None:
        """Apply held requests, then newly taken ones, in order; a batch, or all of them.

        A ledger failure worth retrying holds the request that met it, and those
        after it, for the next tick: none is lost, and none overtakes another.
        """
        while True:
            if not self._held:
                try:
                    taken = self._ledger.requests.take(
                        REQUESTS_PER_TICK, session=self._session, routed=self._shared
                    )
                except LedgerError as exc:
                    what = "other processes' requests (taken at a later tick)"
                    self._mirror.backlog.report(exc, what, kept=False)
                    return
                if not taken:
                    return
                self._held.extend(taken)
            while self._held:
                request = self._held[0]
                try:
                    result = self._apply(request)
                except WorkunitsError as exc:
                    if retryable(exc):
                        what = f"request {request.seq} ({request.verb} {request.target})"
                        what += ", held and applied first at the next tick"
                        self._mirror.backlog.report(exc, what, kept=False)
                        return
                    result = {"changed": False, "error": f"{type(exc).__name__}: {exc}"}
                if result is _LATER:
                    return  # its unit is adopted at this tick: applied at the next one
                self._held.popleft()
                if result is not None:
                    self._mirror.finish_request(request.target, request.seq, result)
            if not until_none_left:
                return

    def _apply(self, request: LedgerRequest) -> dict[str, Any] | None:
        """Apply one request; its answer, or None when the unit's end will answer it
        (``_LATER``: once its pending unit is adopted)."""
        target = request.target
        if target not in self._units:
            if (
                request.verb == "input"
                and self._ledger.units.require(target).status == Status.PENDING
            ):
                return _LATER  # queued for its stdin once it is in memory, in order
            return self._apply_to_row(request)
        control = self._control
        if request.verb == "input":
            data = base64.b64decode(str(request.args.get("data", "")))
            changed = control.send_input(target, data, bool(request.args.get("eof", False)))
            status = self._units.registry.get(target).status.value
            return {"changed": changed, "status": status}
        if request.verb in END_VERBS:
            if request.verb == "cancel":
                changed = control.cancel(target, float(request.args.get("grace", 5.0)))
            else:
                changed = control.kill(target)
            record = self._units.registry.get(target)
            slot = self._units.slot(target)
            if not is_terminal(record.status) and slot is not None:
                slot.end_requests.append(request.seq)  # ending, or its end is already queued
                return None
            return {"changed": changed, "status": record.status.value}
        if request.verb in ("retain", "release"):
            return _lease_instead(self._units.registry.get(target).status.value)
        raise SpecError(f"request verb {request.verb!r} is not applied by a supervisor")

    def _apply_to_row(self, request: LedgerRequest) -> dict[str, Any]:
        """A request for a unit not in memory (evicted, or never started here)."""
        target = request.target
        row = self._ledger.units.require(target)
        if request.verb in END_VERBS and (
            row.status == Status.PENDING
            or (row.status == Status.RUNNING and row.session != self._session)
        ):
            # Never started (pending -> killed), or left running by a dead session
            # whose zygote killed its process: it ends without another attempt.
            reason = Reason.CANCELLED if request.verb == "cancel" else Reason.KILLED
            self._ledger.attempts.write(
                target,
                attempt=row.attempt,
                status=Status.KILLED.value,
                reason=reason.value,
                ended_at=self._clock.now(),
            )
            return {"changed": True, "status": Status.KILLED.value}
        if request.verb in ("retain", "release"):
            return _lease_instead(row.shown_status)
        return {"changed": False, "status": row.shown_status}


def _lease_instead(status: str) -> dict[str, Any]:
    """A retain or release request queued by a client of an earlier release.

    A hold with no owner to renew it would keep its unit forever (the leak
    retain leases replaced): it is refused, saying what to use.
    """
    return {
        "changed": False,
        "status": status,
        "error": "retains are leases now: use Client.retain(id, lease=...), which renews",
    }


def _final_output(row: UnitRow) -> dict[str, object]:
    """The output's size and tail, as any terminal transition stores them (invariant 7).

    A unit lost with its session ends here, not in a terminal transition: without
    this its record said it wrote nothing, and its output file was never removed.
    A unit of another host's session (a shared ledger) has its file there, not here.
    """
    path = row.output_path
    if path is None:
        return {}
    try:
        fd = outputfile.open_for_reading(path)
    except OSError:
        log.exception("could not open the output of %s, lost with its session", row.id)
        return {}
    if fd is None:
        return {}
    try:
        size, tail = outputfile.drain(fd)
    finally:
        os.close(fd)
    outputfile.remove(path)  # an agent's transcript, its other name, is kept
    return {"output_bytes": size, "output_tail": tail}
