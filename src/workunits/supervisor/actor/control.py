"""``UnitControl``: ending units (kill, cancel, stop, shed), deadlines, retention, output reads.

Owned by the SupervisorActor; every method runs in its thread. Kill and
cancel route by prefix (invariant 9); retention and eviction follow
invariant 8; reading output patches only the offset (invariant 6).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pykka

from workunits._core.clock import Clock
from workunits._core.errors import SpecError, UnknownWork
from workunits._core.record import Outcome, WorkRecord, replace
from workunits._core.status import Reason, Status, is_terminal
from workunits._util import outputfile
from workunits._wire.actor_messages import Cancel, Escalate, Kill, StopTeammate
from workunits.actors.base import WorkActor, exit_outcome
from workunits.supervisor.actor.deadlines import Deadlines, Due
from workunits.supervisor.actor.endings import TerminalTransition
from workunits.supervisor.actor.eviction import Eviction
from workunits.supervisor.actor.slots import Ending
from workunits.supervisor.actor.units import Units

OUTPUT_CAP_CHECK_EVERY = 1.0  # seconds between rounds of output-size checks of running units
# Output files looked at in one round, at most. Up to this many running units,
# each is checked every round; beyond it a sweep of them all takes several
# rounds, so the idle supervisor's cost stays flat (a stat is ~2 us, and 5,000
# of them every second were most of its idle CPU).
OUTPUT_CAP_CHECKS_PER_ROUND = 1000


class UnitControl:
    def __init__(
        self,
        *,
        units: Units,
        endings: TerminalTransition,
        eviction: Eviction,
        deadlines: Deadlines,
        clock: Clock,
        eviction_grace: float,
    ) -> None:
        self._units = units
        self._endings = endings
        self._eviction = eviction
        self._deadlines = deadlines
        self._clock = clock
        self._grace = eviction_grace
        self._next_cap_check = 0.0
        self._cap_sweep: list[str] = []  # running units this sweep has yet to check, last first

    # -- kill and cancel, routed by prefix (invariant 9) -----------------------

    def kill(self, work_id: str, reason: Reason = Reason.KILLED) -> bool:
        if self._units.evicted(work_id):
            return False  # it ended long enough ago to leave memory: nothing to kill
        return self.kill_resident(work_id, reason)

    def withdraw_pending(self, work_ids: tuple[str, ...]) -> list[bool]:
        """End each unit still ``pending`` as ``killed`` (reason ``cancelled``); it never runs."""
        out = []
        for work_id in work_ids:
            record = self._units.registry.find(work_id)  # an evicted unit has ended
            pending = record is not None and record.status == Status.PENDING
            if pending:
                self._endings.end(work_id, Outcome(Status.KILLED, reason=Reason.CANCELLED))
            out.append(pending)
        return out

    def kill_resident(self, work_id: str, reason: Reason) -> bool:
        """``kill`` of a unit known to be in memory."""
        record = self._units.registry.get(work_id)
        if record.status == Status.PENDING:
            self._endings.end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        slot = self._units.slot(work_id)
        if record.status != Status.RUNNING or slot is None or slot.ending is Ending.KILL:
            return False
        if slot.actor is None:
            # Waiting between attempts, or for its start to be durable: no process to
            # signal, so it ends now.
            self._endings.end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        if not self._units.tell(work_id, Kill(reason)):
            return False  # it has ended; its report is queued behind this call
        slot.ending = Ending.KILL
        slot.asked = slot.asked or reason  # the first reason wins, as in the unit's actor
        return True

    def as_asked(self, work_id: str, outcome: Outcome) -> Outcome:
        """The end a unit reported, made ``killed`` when a kill or cancel of it was accepted.

        The supervisor's answer decides: once ``kill`` said True, the unit ends
        ``killed`` for that reason even when its process ended by itself before
        its actor heard of the kill (the Reaper reports a shell's exit without
        waiting for the actor). Kept as reported: a ``killed`` end (its own
        reason), a failure we gave a reason (``lost``...), and a failure of the
        unit's actor (a bug in its kind, which the record must show). A
        ``completed`` end is never kept, whatever reason a kind gave it.
        """
        slot = self._units.slot(work_id)
        if slot is None or slot.asked is None or outcome.status is Status.KILLED:
            return outcome
        if outcome.actor_failed or (
            outcome.reason is not None and outcome.status is not Status.COMPLETED
        ):
            return outcome
        return exit_outcome(slot.asked, outcome.exit_code, outcome.signal)

    def send_input(self, work_id: str, data: bytes, eof: bool) -> bool:
        """Queue ``data`` for the unit's stdin (then its end, with ``eof``); False when
        the unit has ended. The writing is the unit's writer thread's (``UnitInput``)."""
        if self._units.evicted(work_id):
            return False
        if is_terminal(self._units.registry.get(work_id).status):
            return False
        slot = self._units.slot(work_id)
        if slot is None or slot.input is None:
            raise SpecError(
                f"{work_id} was not started with stdin=True: its standard input is "
                "/dev/null, and nothing can be written to it"
            )
        slot.input.send(data, eof)
        return True

    def cancel(self, work_id: str, grace: float, reason: Reason = Reason.CANCELLED) -> bool:
        if self._units.evicted(work_id):
            return False
        record = self._units.registry.get(work_id)
        if record.status == Status.PENDING:
            self._endings.end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        slot = self._units.slot(work_id)
        if record.status != Status.RUNNING or slot is None or slot.ending is not None:
            return False
        if slot.actor is None:  # no process yet (see kill_resident)
            self._endings.end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        if not self._units.tell(work_id, Cancel(reason)):
            return False  # it has ended; its report is queued behind this call
        slot.ending = Ending.CANCEL
        slot.asked = reason
        self._deadlines.push(self._clock.now() + grace, work_id, Due.ESCALATE)
        return True

    def stop_teammate(self, work_id: str) -> bool:
        """Stop after the messages already sent (ends ``completed``); False if not running
        (one that ended and left memory too, as ``kill`` says)."""
        if self._units.evicted(work_id):
            record = self._units.get(work_id)
            if not self._units.kinds.actor_class(work_id[0]).accepts_messages:
                raise SpecError(f"{work_id} is a {record.kind} unit; only teammates are stopped")
            return False
        record = self._units.lookup(work_id)
        if not self._units.kinds.actor_class(work_id[0]).accepts_messages:
            raise SpecError(f"{work_id} is a {record.kind} unit; only teammates are stopped")
        slot = self._units.slot(work_id)
        if record.status != Status.RUNNING or slot is None or slot.ending is not None:
            return False
        slot.ending = Ending.STOP  # refuses later messages, which the stop would drop
        self._units.tell(work_id, StopTeammate())
        return True

    def shed(self, n: int | None = None) -> list[str]:
        """Kill up to ``n`` running sheddable units (dreams), newest first; their IDs.

        Newest first: the most recently started dream has the least work to lose.
        """
        kinds = self._units.kinds
        candidates = [
            (r.started_at or 0.0, order, r.id)
            for order, r in enumerate(self._units.registry)
            if r.status == Status.RUNNING
            and kinds.actor_class(r.id[0]).sheddable
            and _ending_of(self._units, r.id) is not Ending.KILL
        ]
        candidates.sort(reverse=True)
        chosen = candidates if n is None else candidates[:n]
        return [work_id for _, _, work_id in chosen if self.kill_resident(work_id, Reason.SHED)]

    def unit_actor(self, work_id: str) -> pykka.ActorRef[WorkActor]:
        """The running unit's actor (for kinds' own control messages and tests)."""
        self._units.lookup(work_id)
        slot = self._units.slot(work_id)
        if slot is None or slot.actor is None:
            raise UnknownWork(f"{work_id} has no running actor")
        return slot.actor

    # -- time ------------------------------------------------------------------

    def run_deadlines(self, now: float) -> int:
        """Timeouts, cancel escalations, evictions and output caps that are due; evictions."""
        evict: list[str] = []
        for work_id, what in self._deadlines.pop_due(now):
            record = self._units.registry.find(work_id)
            if record is None:
                continue
            if what is Due.EVICT:
                # Not before its end has landed: until then memory is all that has it.
                if self._endings.landed(work_id):
                    evict.append(work_id)
            elif record.status == Status.RUNNING:
                slot = self._units.slot(work_id)
                if what is Due.TIMEOUT:
                    # Only the running attempt's own limit: an earlier attempt's is stale.
                    if slot is not None and slot.timeout_at is not None and slot.timeout_at <= now:
                        self.kill_resident(work_id, Reason.TIMEOUT)
                elif what is Due.ESCALATE and slot is not None and slot.ending is Ending.CANCEL:
                    slot.ending = Ending.KILL
                    self._units.tell(work_id, Escalate())
        if now >= self._next_cap_check:
            self._next_cap_check = now + OUTPUT_CAP_CHECK_EVERY
            self._check_output_caps()
        return self._eviction.run(evict, now)

    def _check_output_caps(self) -> None:
        """One round of the output-size sweep (``OUTPUT_CAP_CHECKS_PER_ROUND`` files at most).

        Backs up the kernel's RLIMIT_FSIZE for a shell that ignores SIGXFSZ, and
        an agent's capture for a unit that writes its transcript behind it.
        """
        if not self._cap_sweep:
            self._cap_sweep = [
                work_id for work_id, slot in self._units.slots() if slot.output_cap is not None
            ]
            self._cap_sweep.reverse()  # popped from the end: in the order they started
        for _ in range(min(len(self._cap_sweep), OUTPUT_CAP_CHECKS_PER_ROUND)):
            work_id = self._cap_sweep.pop()
            slot = self._units.slot(work_id)
            if slot is None or slot.output_cap is None:
                continue  # it ended since the sweep began
            record = self._units.registry.find(work_id)
            if record is None or record.output_path is None:
                continue
            if outputfile.size_of(record.output_path) >= slot.output_cap:
                self.kill_resident(work_id, Reason.OUTPUT_CAP)

    # -- retention (invariant 8) and output (invariant 6) ----------------------

    def expired(self, work_ids: list[str], now: float) -> None:
        """Units the retention sweep expired in the ledger: their records in memory
        drop what the rows dropped, so every read says ``expired`` (HTTP 410), not
        only those of units that already left memory."""
        for work_id in work_ids:
            if self._units.registry.find(work_id) is None:
                continue
            self._units.write(
                work_id,
                lambda r: replace(
                    r,
                    expired_at=now,
                    result=None,
                    result_format=None,
                    cause=None,
                    output_tail=b"",
                    progress_message="",
                ),
            )

    def retain(self, work_id: str) -> WorkRecord:
        """A hold by a reader of this process (a stream); none is needed once evicted."""
        if self._units.evicted(work_id):
            return self._units.get(work_id)
        return self._units.write(
            work_id, lambda r: replace(r, retain=r.retain + 1, evict_after=None)
        )[1]

    def release(self, work_id: str) -> WorkRecord:
        if self._units.evicted(work_id):
            return self._units.get(work_id)
        record = self._units.registry.get(work_id)
        if record.retain == 0:
            return record
        now = self._clock.now()

        def release(r: WorkRecord) -> WorkRecord:
            left = r.retain - 1
            evict_after = (
                now + self._grace if left == 0 and is_terminal(r.status) else r.evict_after
            )
            return replace(r, retain=left, evict_after=evict_after)

        _, new = self._units.write(work_id, release)
        if new.retain == 0 and is_terminal(new.status):
            slot = self._units.slot(work_id)
            if slot is not None and slot.read_fd is not None:
                os.close(slot.read_fd)
                slot.read_fd = None
            if new.evict_after is not None:
                self._deadlines.push(new.evict_after, work_id, Due.EVICT)
        return new

    # -- shutdown (invariant 10) -------------------------------------------------

    def unresumable_running(self, resumable: Callable[[str], bool]) -> list[str]:
        """The running units a deploy would end (they cannot resume), for a drain."""
        return [
            r.id for r in self._units.registry if r.status == Status.RUNNING and not resumable(r.id)
        ]

    def begin_shutdown(
        self, *, deploy: bool, resumable: Callable[[str], bool], grace: float = 5.0
    ) -> list[str]:
        """Kill all running work; return the IDs still ending.

        With ``deploy``, resumable running units and pending units are stopped
        without a terminal write: the next session resumes or starts them. A
        running one is asked to stop as a cancel asks (an agent at its next
        checkpoint, a command by SIGTERM), with ``handed-over`` as its reason,
        and killed after ``grace``: what it saved is what its next attempt
        resumes from.
        """
        registry = self._units.registry
        if deploy:
            for record in list(registry):
                slot = self._units.slot(record.id)
                if slot is None:
                    continue
                if record.status == Status.PENDING:
                    slot.suspended = True
                elif record.status == Status.RUNNING and resumable(record.id):
                    slot.suspended = True
                    if slot.ending is None:
                        self.cancel(record.id, grace, Reason.HANDED_OVER)
        # Pending units end here and now (no process to wait for): one commit for all
        # of them rather than one each.
        pending = [r.id for r in registry if r.status == Status.PENDING]
        self._endings.end_many(pending, Outcome(Status.KILLED, reason=Reason.SHUTDOWN))
        for record in registry:
            slot = self._units.slot(record.id)
            if slot is not None and slot.suspended and slot.ending is Ending.CANCEL:
                continue  # asked to stop for the next supervisor: killed only past the grace
            if not is_terminal(record.status):
                self.kill_resident(record.id, Reason.SHUTDOWN)
        return [r.id for r in registry if not is_terminal(r.status)]

    def force_end(self, work_ids: tuple[str, ...], error: str) -> None:
        """Record units that did not report their end in time as killed (shutdown)."""
        refs = [slot.actor for work_id in work_ids if (slot := self._units.slot(work_id))]
        for work_id in work_ids:
            self._units.tell(work_id, Escalate())  # asked to stop at a deploy: killed now
        self._endings.end_many(
            list(work_ids), Outcome(Status.KILLED, reason=Reason.SHUTDOWN, error=error)
        )
        for ref in refs:
            if ref is not None:
                ref.stop(block=False)


def _ending_of(units: Units, work_id: str) -> Ending | None:
    slot = units.slot(work_id)
    return None if slot is None else slot.ending
