"""``Retries``: a failed attempt of a unit with a retry policy is run again, same ID.

Owned by the SupervisorActor; every method runs in its thread. The lifecycle
stays strict (invariant 2): between attempts the unit stays ``running`` -- no
status change, no notice -- with ``retry_at`` set and a progress message
(``retry 2/5 in 4 s``). Its one notice comes with its final end.

In order, when an attempt fails and the policy retries it:

1. the ledger records the failed attempt and when the next is due, fenced by
   the attempt and fully synced (a supervisor SIGKILLed now finds the schedule);
2. memory follows (``attempts``, ``retry_at``, the message); the attempt's
   actor has already stopped;
3. at ``retry_at`` the ledger begins the next attempt (attempt + 1, so a late
   write of the failed one is refused: invariant 13), and the unit's actor is
   started again with its last checkpoint.

If step 1 fails, the attempt's end is the unit's end, as without a policy:
a retry nobody could find after a restart would be a unit stuck ``running``.

A teammate's restart policy (``_core.restart``) rides the same steps with no wait:
its attempt ends, the ledger records it (its end time counts toward the
restart intensity), and the next attempt starts at once, same ID, ``on_start``
again. Asks open to the attempt that ended fail, naming the restart; those
sent while it restarts are held, then delivered to the new attempt
(``restarting``/``restarted``, the messaging's). Past the intensity the end is
the unit's, ``failed`` with reason ``restart-intensity``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable

from workunits._core.clock import Clock
from workunits._core.errors import UnknownKind, WorkunitsError
from workunits._core.record import Outcome, WorkRecord, replace
from workunits._core.restart import Restart
from workunits._core.retry import Attempt, counted
from workunits._core.status import Reason, Status, is_terminal
from workunits._ledger import Ledger, UnitRow
from workunits.actors.kind_code import call_kind
from workunits.supervisor.actor.slots import Launch
from workunits.supervisor.actor.starts import Starts
from workunits.supervisor.actor.units import Units

log = logging.getLogger(__name__)

BUSY_RECHECK = 0.05  # seconds before a retry that found its kind at its limit looks again
FAILED_BEGIN_RECHECK = 1.0  # seconds before a retry whose ledger write failed tries again


def _ignore(work_id: str, why: str = "") -> None:
    return None


class Retries:
    def __init__(
        self,
        *,
        units: Units,
        starts: Starts,
        ledger: Ledger,
        session: str,
        clock: Clock,
        restarting: Callable[[str, str], None] = _ignore,
        restarted: Callable[[str], None] = _ignore,
    ) -> None:
        self._units = units
        self._starts = starts
        self._ledger = ledger
        self._session = session
        self._clock = clock
        # The messaging's: a teammate's attempt ended and it restarts (open asks fail,
        # new ones are held); its next attempt's actor is up (held messages go to it).
        self._restarting = restarting
        self._restarted = restarted
        # (when, seq, unit, the attempt that failed): entries may be stale; re-checked.
        self._due: list[tuple[float, int, str, int]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    # -- an attempt ended ------------------------------------------------------------

    def intercept(self, work_id: str, outcome: Outcome) -> Outcome | None:
        """The end to make of an attempt that ended; None when it is run again instead.

        That end is ``outcome`` itself, or, for a teammate restarted too often,
        ``failed`` with reason ``restart-intensity``.
        """
        record = self._units.registry.find(work_id)
        slot = self._units.slot(work_id)
        if record is None or slot is None or is_terminal(record.status):
            return outcome
        if slot.ending is not None or slot.suspended:
            return outcome  # it is being killed, cancelled or stopped: asked for
        if record.restart is not None:
            return self._restart(record, record.restart, outcome)
        policy = record.retry
        if policy is None:
            return outcome
        # Attempts handed over at deploys are no failures (invariant 13): neither
        # the limit, the backoff nor the "retry N/M" count takes them in.
        failed = counted(record.attempt, record.attempts)
        if failed >= policy.max_attempts:
            return outcome
        if not policy.retries(outcome):
            return outcome
        delay = policy.delay(failed)
        message = f"retry {failed + 1}/{policy.max_attempts} in {_seconds(delay)}"
        return None if self._schedule(record, outcome, delay, message) else outcome

    def _restart(self, record: WorkRecord, policy: Restart, outcome: Outcome) -> Outcome | None:
        if not policy.restarts(outcome):
            return outcome
        now = self._clock.now()
        if policy.exceeded(record.attempts, now):
            return _too_often(policy, outcome)
        n = policy.recent(record.attempts, now) + 1
        message = f"restart {n}/{policy.max_restarts} within {_seconds(policy.within)}"
        if not self._schedule(record, outcome, 0.0, message):
            return outcome
        self._restarting(record.id, _ended(record.attempt, outcome))
        self.tick()  # no wait between a teammate's attempts: start the next one now
        return None

    def _schedule(self, record: WorkRecord, outcome: Outcome, delay: float, message: str) -> bool:
        """Record the failed attempt and when the next is due, then wait for it (steps 1-2)."""
        work_id = record.id
        now = self._clock.now()
        failed = Attempt(
            attempt=record.attempt,
            ended_at=now,
            error=outcome.error,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            reason=outcome.reason,
            retry_at=now + delay,
        )
        try:
            log_so_far = self._ledger.attempts.schedule_retry(
                work_id, record.attempt, failed, message
            )
        except WorkunitsError:
            log.exception("ledger: could not schedule the next attempt of %s; it ends now", work_id)
            return False
        slot = self._units.slot(work_id)
        assert slot is not None  # the caller found it
        slot.actor = slot.output_cap = slot.ending = slot.asked = slot.timeout_at = None
        slot.pid = slot.progress = None  # the schedule's write carried them

        def waiting(r: WorkRecord) -> WorkRecord:
            return replace(
                r,
                pid=None,
                attempts=log_so_far,
                retry_at=failed.retry_at,
                progress_message=message,
                progress_at=now,
            )

        self._units.write(work_id, waiting)
        self._push(now + delay, work_id, record.attempt)
        return True

    # -- a restarted supervisor finds a unit waiting --------------------------------

    def adopt_waiting(self, row: UnitRow) -> bool:
        """A dead session's unit waiting between attempts: continue its schedule here.

        False when it cannot be (its kind is unknown, its spec will not load):
        the caller fails it ``lost``.
        """
        assert row.retry_at is not None
        try:
            actor_class = self._units.kinds.actor_class(row.id[0])
            spec, timeout = call_kind(
                actor_class, actor_class.from_durable, self._ledger.units.load_spec(row.id)
            )
            self._ledger.attempts.write(
                row.id, attempt=row.attempt, session=self._session, pid=None
            )
        except (WorkunitsError, UnknownKind):
            log.exception("could not continue the retries of %s", row.id)
            return False
        record = replace(row.to_record(), pid=None)
        self._starts.hold(record, Launch(actor_class, spec, timeout))
        self._push(row.retry_at, row.id, row.attempt)
        return True

    def adopt_lost(self, row: UnitRow) -> Outcome | None:
        """A dead session's teammate with a restart policy, lost while it ran: restart it.

        Its lost attempt counts toward the restart intensity, whose window the
        stored attempts carry over. Returns None when it restarts, else the
        end to record (``lost``, or ``restart-intensity``).
        """
        assert row.restart is not None
        assert row.retry_at is None
        policy = row.restart
        now = self._clock.now()
        error = f"lost: its supervisor (session {row.session}) ended while it ran"
        lost = Outcome(Status.FAILED, reason=Reason.LOST, error=error)
        if not policy.restarts(lost):
            return lost
        if policy.exceeded(row.attempts, now):
            return _too_often(policy, lost)
        n = policy.recent(row.attempts, now) + 1
        message = f"restart {n}/{policy.max_restarts} within {_seconds(policy.within)}"
        failed = Attempt(row.attempt, now, error, reason=Reason.LOST, retry_at=now)
        try:
            log_so_far = self._ledger.attempts.schedule_retry(row.id, row.attempt, failed, message)
        except WorkunitsError:
            log.exception("ledger: could not schedule the restart of %s", row.id)
            return lost
        waiting = replace(row, retry_at=now, attempts=log_so_far, progress_message=message)
        return None if self.adopt_waiting(waiting) else lost

    # -- every tick ------------------------------------------------------------------

    def tick(self) -> None:
        """Start the attempts that are due."""
        now = self._clock.now()
        while self._due and self._due[0][0] <= now:
            _, _, work_id, failed = heapq.heappop(self._due)
            try:
                self._begin(work_id, failed, now)
            except Exception:  # a bug: it must not cost the other retries their start
                log.exception("supervisor: could not start the next attempt of %s", work_id)

    def _begin(self, work_id: str, failed: int, now: float) -> None:
        record = self._units.registry.find(work_id)
        slot = self._units.slot(work_id)
        if (
            record is None
            or slot is None
            or slot.launch is None
            or record.status != Status.RUNNING
            or record.attempt != failed
            or record.retry_at is None
        ):
            return  # it ended meanwhile (a kill, its parent's end), or this entry is stale
        if not self._starts.has_slot(record.kind):
            self._push(now + BUSY_RECHECK, work_id, failed)
            return
        try:
            attempt, row = self._ledger.attempts.begin_retry(
                work_id, self._session, expected=failed
            )
        except WorkunitsError:
            log.exception("ledger: could not begin the next attempt of %s", work_id)
            self._push(now + FAILED_BEGIN_RECHECK, work_id, failed)
            return
        policy = record.retry
        total = policy.max_attempts if policy is not None else attempt
        nth = counted(attempt, record.attempts)  # of those that count: deploys do not
        message = f"attempt {nth}/{total}" if record.restart is None else f"attempt {attempt}"

        def next_attempt(r: WorkRecord) -> WorkRecord:
            return replace(
                r,
                attempt=attempt,
                retry_at=None,
                pid=None,
                progress_message=message,
                progress_at=now,
            )

        _, record = self._units.write(work_id, next_attempt)
        self._starts.launch(record, slot.launch, row.checkpoint)
        if record.restart is not None:
            self._restarted(work_id)

    def _push(self, when: float, work_id: str, failed: int) -> None:
        heapq.heappush(self._due, (when, next(self._seq), work_id, failed))


def _seconds(delay: float) -> str:
    return f"{delay:.0f} s" if delay >= 10 else f"{delay:.1f} s"


def _ended(attempt: int, outcome: Outcome) -> str:
    """How an attempt ended, for the asks it leaves unanswered."""
    how = Attempt(
        attempt, 0.0, outcome.error, outcome.exit_code, outcome.signal, outcome.reason
    ).describe()
    if outcome.status == Status.COMPLETED:
        how = "it returned"
    return f"attempt {attempt} ended: {how}"


def _too_often(policy: Restart, outcome: Outcome) -> Outcome:
    """The last end of a teammate restarted more often than its policy allows."""
    error = (
        f"restart intensity: more than {policy.max_restarts} restarts within "
        f"{_seconds(policy.within)}; its last attempt: "
    )
    last = Attempt(0, 0.0, outcome.error, outcome.exit_code, outcome.signal, outcome.reason)
    error += "it returned" if outcome.status == Status.COMPLETED else last.describe()
    if outcome.error and outcome.error.strip():
        error += "\n" + outcome.error  # the traceback stays readable
    return replace(
        outcome,
        status=Status.FAILED,
        reason=Reason.RESTART_INTENSITY,
        error=error,
        result=None,
        result_format=None,
    )
