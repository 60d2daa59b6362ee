"""The terminal transition (invariant 7), owned by the SupervisorActor.

In order, for each unit that ends: its record becomes terminal in memory (its
output drained to a size and a tail, its file removed), then the terminal row
and its outbox notice commit to the ledger, fully synced (invariant 11), and
only then does anyone hear of it -- asks waiting on it fail, waiters wake, its
parent gets its one notice, its children are killed, a queued unit of its
kind starts.

Ends reported back to back by unit actors commit as one group (one fsync,
which profiling showed is the supervisor thread's largest cost per unit). An
end that finds nothing else waiting in the actor's inbox commits at once (a
lone end pays no extra message); otherwise the first ``EndReport`` of a group
makes the actor tell itself ``FlushEnds``, the ends that arrive before that
flush is handled join the group, and the flush commits them. Any other
message commits the group before it is handled (``SupervisorActor.on_receive``),
as does stopping, so nothing -- an ask, a tick, another unit -- sees an end
that is not yet durable. Every method runs in the supervisor actor's thread.

An end whose write fails (a full disk, an I/O error) is not dropped: the
``LedgerMirror`` keeps it and retries it every tick, and only when it lands
does anyone hear of it, as above (invariant 14). Until then its record is
terminal in memory (``get`` marks it not durable), its children are killed
at once (no unit outlives its parent's process, durable or not), and it is
never evicted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workunits._core.clock import Clock
from workunits._core.record import Outcome, WorkRecord, replace
from workunits._core.status import Status, is_terminal
from workunits._util import outputfile
from workunits.supervisor.actor.deadlines import Deadlines, Due
from workunits.supervisor.actor.ledger_mirror import LedgerMirror
from workunits.supervisor.actor.notices import Notices
from workunits.supervisor.actor.slots import UnitSlot
from workunits.supervisor.actor.units import Units

if TYPE_CHECKING:
    from workunits._zygote.reaper import Reaper

log = logging.getLogger(__name__)

MAX_ENDS_PER_COMMIT = 256  # a longer run of ends is committed in several groups


@dataclass(frozen=True, slots=True)
class EndReport:
    """A unit's end: told by its actor, or by the Reaper thread for a kind whose
    ``end_on_exit`` gives the outcome (a shell), once per unit either way."""

    work_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class EndReports:
    """The ends the Reaper heard of in one wake (``EndsPerWake``): one message, one commit."""

    ends: tuple[EndReport, ...]


class EndsPerWake:
    """How unit actors and the Reaper report an end (``UnitBinding.report_end``).

    An end reported on the Reaper's thread -- a shell's exit, the exit of an
    agent that was killed -- waits for the rest of that wake: the ends of all
    the processes the kernel reported together travel to the supervisor as one
    ``EndReports`` and commit in one transaction with their notices. An end
    reported on any other thread (a unit's actor) is told at once; ends that
    arrive back to back still commit together (``TerminalTransition.report``).
    """

    def __init__(self, reaper: Reaper, tell: Callable[[object], None]) -> None:
        self._reaper = reaper
        self._tell = tell
        self._wake: list[EndReport] = []  # the Reaper thread's only

    def __call__(self, work_id: str, outcome: Outcome) -> None:
        end = EndReport(work_id, outcome)
        if not self._reaper.on_its_thread():
            self._tell(end)
            return
        if not self._wake:
            self._reaper.after_wake(self._send)
        self._wake.append(end)

    def _send(self) -> None:
        ends, self._wake = self._wake, []
        self._tell(ends[0] if len(ends) == 1 else EndReports(tuple(ends)))


@dataclass(frozen=True, slots=True)
class FlushEnds:
    """Told by the supervisor to itself at the first end of a group: commit the group."""


@dataclass(frozen=True, slots=True)
class _Ended:
    old: WorkRecord
    new: WorkRecord
    slot: UnitSlot | None
    notify: bool  # the parent gets a notice (the record was not notified before)


class TerminalTransition:
    """Ending units: memory, then the ledger, then everyone else."""

    def __init__(
        self,
        *,
        units: Units,
        mirror: LedgerMirror,
        notices: Notices,
        deadlines: Deadlines,
        clock: Clock,
        eviction_grace: float,
        fail_asks: Callable[[WorkRecord], None],
        kill_children: Callable[[WorkRecord], None],
        cascade: Callable[[WorkRecord], None],
        tell_self: Callable[[object], None],
        idle: Callable[[], bool],
    ) -> None:
        self._units = units
        self._mirror = mirror
        self._notices = notices
        self._deadlines = deadlines
        self._clock = clock
        self._grace = eviction_grace
        self._fail_asks = fail_asks
        self._kill_children = kill_children
        # The actor's: kill the ended unit's children, start a queued unit of its kind.
        self._cascade = cascade
        self._tell_self = tell_self
        self._idle = idle  # nothing waits in the actor's inbox: nothing to group with
        # Ends made terminal in memory, not yet committed (in report order).
        self._batch: list[_Ended] = []
        self._flush_queued = False  # a FlushEnds is in the inbox
        # Ends committed whose write has not landed yet; the retry that lands one completes it.
        self._unlanded: dict[str, _Ended] = {}

    @property
    def pending(self) -> bool:
        """Ends are terminal in memory but not yet durable: commit before anything else."""
        return bool(self._batch)

    def landed(self, work_id: str) -> bool:
        """False while ``work_id``'s end is terminal in memory but not yet in the ledger."""
        return work_id not in self._unlanded

    def report(self, work_id: str, outcome: Outcome) -> None:
        """An EndReport: join the group, which the next FlushEnds (or any other message) commits."""
        self._make_terminal(work_id, outcome)
        if not self._batch:
            return
        if len(self._batch) >= MAX_ENDS_PER_COMMIT or (not self._flush_queued and self._idle()):
            self.commit()
        elif not self._flush_queued:
            self._flush_queued = True
            self._tell_self(FlushEnds())

    def report_group(self, ends: list[tuple[str, Outcome]]) -> None:
        """An ``EndReports``: these ends, and what waited for them, in one commit."""
        for work_id, outcome in ends:
            self._make_terminal(work_id, outcome)
        if self._flush_queued:
            return  # the FlushEnds on its way commits them with the group before them
        self.commit()

    def flush(self) -> None:
        """The FlushEnds told at the group's first end has come round."""
        self._flush_queued = False
        self.commit()

    def end(self, work_id: str, outcome: Outcome) -> None:
        """Make the unit terminal now: in memory, then in the ledger, then tell everyone."""
        self._make_terminal(work_id, outcome)
        self.commit()

    def end_many(self, work_ids: list[str], outcome: Outcome) -> None:
        """``end`` for each, with one commit for them all (close ends every pending unit)."""
        for work_id in work_ids:
            self._make_terminal(work_id, outcome)
        self.commit()

    def checked(self, work_id: str, outcome: object) -> Outcome:
        """A kind's reported end (an ``EndReport``'s), as the supervisor takes it.

        A kind's bug -- something that is not an ``Outcome`` (``finish("done")``),
        or an ``Outcome`` whose status is not an end -- fails the unit, naming the
        bug: kept as it came, it would run on for ever, unkillable (its actor has
        stopped). Checked first, before anything reads the outcome.
        """
        if (
            isinstance(outcome, Outcome)
            and isinstance(outcome.status, str)  # a Status, or its value
            and is_terminal(outcome.status)
        ):
            return outcome
        record = self._units.registry.find(work_id)
        kind = "?" if record is None else record.kind
        if isinstance(outcome, Outcome):
            status = getattr(outcome.status, "value", outcome.status)
            what = f"an end with status {status}, which is not an end"
        else:
            what = f"{outcome!r} ({type(outcome).__name__}) as its end, not an Outcome"
        return Outcome(
            Status.FAILED,
            error=f"its kind ({kind}) reported {what}: a bug in that kind",
            actor_failed=True,
        )

    def _make_terminal(self, work_id: str, outcome: Outcome) -> None:
        """The in-memory half of the terminal transition: no one is told yet."""
        record = self._units.registry.find(work_id)
        if record is None or is_terminal(record.status):
            return  # already ended: "exited after kill" and friends are normal
        slot = self._units.slot(work_id)
        size, tail = self._drain_output(record, slot)
        now = self._clock.now()
        notify = not record.notified

        def terminal(r: WorkRecord) -> WorkRecord:
            return replace(
                r,
                status=outcome.status,
                ended_at=now,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
                error=outcome.error,
                reason=outcome.reason,
                result=outcome.result,
                result_format=outcome.result_format,
                cause=outcome.cause,
                output_bytes=size,
                output_tail=tail,
                evict_after=None if r.retain else now + self._grace,
                notified=True,
            )

        old, new = self._units.registry.update(work_id, terminal)
        if new is old:
            return
        if slot is not None:  # no longer running
            slot.actor = slot.output_cap = slot.ending = slot.asked = None
            slot.close_input()  # its stdin: nothing more is written
        self._batch.append(_Ended(old, new, slot, notify))

    def commit(self) -> None:
        """Commit the pending terminal rows and notices (invariants 7 and 11), then tell.

        The ledger first: nobody sees an end, or its notice, before it is durable.
        """
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        for ended in batch:
            self._unlanded[ended.new.id] = ended
        try:
            self._mirror.end([(e.new, e.slot, self._completer(e)) for e in batch])
        except Exception:  # a bug, not a ledger error (those are kept or logged inside)
            log.exception("supervisor: could not record %d ends", len(batch))
            for ended in batch:
                self._complete(ended)
        for ended in batch:
            if ended.new.id in self._unlanded:  # kept for a retry: its process is gone
                try:
                    self._kill_children(ended.new)
                except Exception:
                    log.exception("supervisor: failed to end the children of %s", ended.new.id)

    def _completer(self, ended: _Ended) -> Callable[[], None]:
        return lambda: self._complete(ended)

    def _complete(self, ended: _Ended) -> None:
        """The end has landed (now, or on a retry): tell everyone (see the module docstring)."""
        if self._unlanded.pop(ended.new.id, None) is None:
            return  # completed already
        # A failure must neither stop the supervisor nor cost the other ends their effects.
        try:
            self._after_end(ended)
        except Exception:
            log.exception("supervisor: failed to complete the end of %s", ended.new.id)

    def _after_end(self, ended: _Ended) -> None:
        # The record as it is now: a retry may land the end after later changes (a read).
        new = self._units.registry.find(ended.new.id) or ended.new
        self._fail_asks(new)
        # A deploy stopped it without ending it: the ledger keeps it pending or
        # running for the next session, so nobody is told it ended (waits hear
        # of the close instead: TerminalWaiters.close).
        suspended = ended.slot is not None and ended.slot.suspended
        if suspended:
            self._units.tell_stopped(new.id)  # a deploy's close waits for this, not an end
        else:
            self._units.tell_subscribers(ended.old, new)
        if ended.notify and not suspended:
            self._notices.notify_parent(new)
        if new.evict_after is not None:
            self._deadlines.push(new.evict_after, new.id, Due.EVICT)
        self._cascade(new)

    def _drain_output(self, record: WorkRecord, slot: UnitSlot | None) -> tuple[int, bytes]:
        """Final drain: size and tail, then remove the file (an agent's transcript survives).

        A retained reader that still lags keeps a descriptor, so a stream loses
        nothing to the removal.
        """
        path = record.output_path
        if path is None:
            return record.output_bytes, record.output_tail
        fd = None if slot is None else slot.read_fd
        if slot is not None:
            slot.read_fd = None
        if fd is None:
            try:
                fd = outputfile.open_for_reading(path)
            except OSError:
                # Out of descriptors (EMFILE/ENFILE) or the like: the unit must still
                # end, so keep its size (stat needs no descriptor) and lose only the tail.
                log.exception("could not open the output of %s for its final drain", record.id)
                size = outputfile.size_of(path)
                outputfile.remove(path)
                return size, b""
        if fd is None:
            return 0, b""
        try:
            size, tail = outputfile.drain(fd)
        finally:
            outputfile.remove(path)
        if record.retain and record.output_offset < size and slot is not None:
            slot.read_fd = fd
        else:
            os.close(fd)
        return size, tail
