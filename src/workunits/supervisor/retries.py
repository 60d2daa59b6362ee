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
"""

from __future__ import annotations

import heapq
import itertools
import logging

from workunits._clock import Clock
from workunits._errors import UnknownKind, WorkunitsError
from workunits._ledger import Ledger, UnitRow
from workunits._record import Outcome, WorkRecord, replace
from workunits._retry import Attempt
from workunits._status import Status, is_terminal
from workunits.supervisor.slots import Launch
from workunits.supervisor.starts import Starts
from workunits.supervisor.units import Units

log = logging.getLogger(__name__)

BUSY_RECHECK = 0.05  # seconds before a retry that found its kind at its limit looks again
FAILED_BEGIN_RECHECK = 1.0  # seconds before a retry whose ledger write failed tries again


class Retries:
    def __init__(
        self, *, units: Units, starts: Starts, ledger: Ledger, session: str, clock: Clock
    ) -> None:
        self._units = units
        self._starts = starts
        self._ledger = ledger
        self._session = session
        self._clock = clock
        # (when, seq, unit, the attempt that failed): entries may be stale; re-checked.
        self._due: list[tuple[float, int, str, int]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    # -- an attempt ended ------------------------------------------------------------

    def intercept(self, work_id: str, outcome: Outcome) -> bool:
        """True when ``outcome`` is not the unit's end: the attempt is retried instead."""
        record = self._units.registry.find(work_id)
        slot = self._units.slot(work_id)
        if record is None or slot is None or is_terminal(record.status):
            return False
        policy = record.retry
        if policy is None or slot.ending is not None or slot.suspended:
            return False  # no policy; or it is being killed, cancelled or stopped
        if record.attempt >= policy.max_attempts or not policy.retries(outcome):
            return False
        now = self._clock.now()
        delay = policy.delay(record.attempt)
        failed = Attempt(
            attempt=record.attempt,
            ended_at=now,
            error=outcome.error,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            reason=outcome.reason,
            retry_at=now + delay,
        )
        message = f"retry {record.attempt + 1}/{policy.max_attempts} in {_seconds(delay)}"
        try:
            log_so_far = self._ledger.schedule_retry(work_id, record.attempt, failed, message)
        except WorkunitsError:
            log.exception("ledger: could not schedule the retry of %s; it ends now", work_id)
            return False
        slot.actor = slot.output_cap = slot.ending = slot.timeout_at = None
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
            spec, timeout = actor_class.from_durable(self._ledger.load_spec(row.id))
            self._ledger.write(row.id, attempt=row.attempt, session=self._session, pid=None)
        except (WorkunitsError, UnknownKind):
            log.exception("could not continue the retries of %s", row.id)
            return False
        record = replace(row.to_record(), pid=None)
        self._starts.hold(record, Launch(actor_class, spec, timeout))
        self._push(row.retry_at, row.id, row.attempt)
        return True

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
            attempt, row = self._ledger.begin_retry(work_id, self._session, expected=failed)
        except WorkunitsError:
            log.exception("ledger: could not begin the next attempt of %s", work_id)
            self._push(now + FAILED_BEGIN_RECHECK, work_id, failed)
            return
        policy = record.retry
        total = policy.max_attempts if policy is not None else attempt

        def next_attempt(r: WorkRecord) -> WorkRecord:
            return replace(
                r,
                attempt=attempt,
                retry_at=None,
                pid=None,
                progress_message=f"attempt {attempt}/{total}",
                progress_at=now,
            )

        _, record = self._units.write(work_id, next_attempt)
        self._starts.launch(record, slot.launch, row.checkpoint)

    def _push(self, when: float, work_id: str, failed: int) -> None:
        heapq.heappush(self._due, (when, next(self._seq), work_id, failed))


def _seconds(delay: float) -> str:
    return f"{delay:.0f} s" if delay >= 10 else f"{delay:.1f} s"
