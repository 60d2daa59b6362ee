"""The terminal transition (invariant 7), for the SupervisorActor; a base class of it.

In order, for each unit that ends: its record becomes terminal in memory (its
output drained to a size and a tail, its file removed), then the terminal row
and its outbox notice commit to the ledger, fully synced (invariant 11), and
only then does anyone hear of it -- asks waiting on it fail, waiters wake, its
parent gets its one notice, its children are killed, a queued unit of its
kind starts.

Ends reported back to back by unit actors commit as one group (one fsync):
see ``_handle_receive``. Every method runs in the supervisor actor's thread.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pykka

from workunits import _outputfile
from workunits._record import Notification, Outcome, WorkRecord, replace
from workunits._status import Reason, is_terminal
from workunits._wire.actor_messages import ChildEnded
from workunits.supervisor.sweep import Due

if TYPE_CHECKING:
    from collections import deque

    from workunits._clock import Clock
    from workunits._mailbox import Mailbox
    from workunits.actors.base import WorkActor
    from workunits.supervisor.kinds import Kinds
    from workunits.supervisor.registry import Registry
    from workunits.supervisor.sweep import Deadlines

log = logging.getLogger(__name__)

MAX_ENDS_PER_COMMIT = 256  # a longer run of ends is committed in several groups


@dataclass(frozen=True, slots=True)
class EndReport:
    work_id: str
    outcome: Outcome


class TerminalTransition:
    """Ending units: memory, then the ledger, then everyone else; mixed into SupervisorActor."""

    if TYPE_CHECKING:  # provided by SupervisorActor and its other bases
        registry: Registry
        kinds: Kinds
        actor_inbox: Any
        _clock: Clock
        _grace: float
        _actors: dict[str, pykka.ActorRef[WorkActor]]
        _output_caps: dict[str, int]
        _ending: dict[str, str]
        _read_fds: dict[str, int]
        _mailboxes: dict[str | None, Mailbox]
        _deadlines: Deadlines
        _queued: dict[str, deque[Any]]
        _suspended: set[str]

        def _ledger_end(self, ends: list[tuple[WorkRecord, WorkRecord]]) -> None: ...
        def _tell_subscribers(self, old: WorkRecord | None, new: WorkRecord) -> None: ...
        def _fail_asks(self, record: WorkRecord) -> None: ...
        def _kill(self, work_id: str, reason: Reason) -> bool: ...
        def _start_queued(self, kind: str) -> None: ...
        def _mailbox(self, owner: str | None) -> Mailbox: ...

    # Ends made terminal in memory, not yet committed: (old, new, notify parent).
    _ending_batch: list[tuple[WorkRecord, WorkRecord, bool]]

    def _handle_receive(self, message: Any) -> Any:
        """pykka's dispatch of every message, wrapped for group commit of ends.

        Consecutive EndReports are made terminal in memory and committed in one
        fully synced transaction (one fsync, which profiling showed is the
        supervisor thread's largest cost per unit). The group is committed before
        any other message is handled and whenever the inbox runs empty, so nothing
        -- an ask, a tick, another unit -- sees an end that is not yet durable.
        """
        if self._ending_batch and not isinstance(message, EndReport):
            self._commit_ends()
        try:
            return super()._handle_receive(message)  # type: ignore[misc]
        finally:
            if self._ending_batch and (
                len(self._ending_batch) >= MAX_ENDS_PER_COMMIT or self.actor_inbox.empty()
            ):
                self._commit_ends()

    def _end(self, work_id: str, outcome: Outcome, *, group: bool = False) -> None:
        """Make the unit terminal: in memory, then in the ledger, then tell everyone.

        With ``group`` the ledger write waits for the end of a run of EndReports
        (see _handle_receive); nothing else runs before it is committed.
        """
        ended = self._make_terminal(work_id, outcome)
        if ended is None:
            return
        self._ending_batch.append(ended)
        if not group:
            self._commit_ends()

    def _make_terminal(
        self, work_id: str, outcome: Outcome
    ) -> tuple[WorkRecord, WorkRecord, bool] | None:
        """The in-memory half of the terminal transition: no one is told yet."""
        record = self.registry.find(work_id)
        if record is None or is_terminal(record.status):
            return None  # already ended: "exited after kill" and friends are normal
        size, tail = self._drain_output(record)
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

        old, new = self.registry.update(work_id, terminal)
        if new is old:
            return None
        self._actors.pop(work_id, None)
        self._output_caps.pop(work_id, None)
        self._ending.pop(work_id, None)
        return old, new, notify

    def _commit_ends(self) -> None:
        """Commit the pending terminal rows and notices (invariants 7 and 11), then tell.

        The ledger first: nobody sees an end, or its notice, before it is durable.
        """
        batch, self._ending_batch = self._ending_batch, []
        try:
            self._ledger_end([(old, new) for old, new, _ in batch])
        except Exception:  # a bug, not a ledger error (those are logged inside)
            log.exception("supervisor: could not record %d ends", len(batch))
        for old, new, notify in batch:
            # Runs outside on_receive's guard too (from _handle_receive): a failure
            # must neither stop the supervisor nor cost the other ends their effects.
            try:
                self._after_end(old, new, notify=notify)
            except Exception:
                log.exception("supervisor: failed to complete the end of %s", new.id)

    def _after_end(self, old: WorkRecord, new: WorkRecord, *, notify: bool) -> None:
        self._fail_asks(new)
        self._tell_subscribers(old, new)
        if notify and new.id not in self._suspended:
            self._notify_parent(new)
        if new.evict_after is not None:
            self._deadlines.push(new.evict_after, new.id, Due.EVICT)
        for child in self.registry.children(new.id):
            self._kill(child, Reason.PARENT_ENDED)
        if new.kind in self._queued:
            self._start_queued(new.kind)

    def _drain_output(self, record: WorkRecord) -> tuple[int, bytes]:
        """Final drain: size and tail, then remove the file (a symlink's target survives).

        A retained reader that still lags keeps a descriptor, so a stream loses
        nothing to the removal.
        """
        path = record.output_path
        if path is None:
            return record.output_bytes, record.output_tail
        fd = self._read_fds.pop(record.id, None)
        if fd is None:
            try:
                fd = _outputfile.open_for_reading(path)
            except OSError:
                # Out of descriptors (EMFILE/ENFILE) or the like: the unit must still
                # end, so keep its size (stat needs no descriptor) and lose only the tail.
                log.exception("could not open the output of %s for its final drain", record.id)
                size = _outputfile.size_of(path)
                _outputfile.remove(path)
                return size, b""
        if fd is None:
            return 0, b""
        try:
            size, tail = _outputfile.drain(fd)
        finally:
            _outputfile.remove(path)
        if record.retain and record.output_offset < size:
            self._read_fds[record.id] = fd
        else:
            os.close(fd)
        return size, tail

    def _notify_parent(self, record: WorkRecord) -> None:
        """The one notice of a terminal unit: into its parent's process, or its mailbox."""
        if self._relay(record.parent, ChildEnded(record)):
            return
        if record.parent is None and None not in self._mailboxes:
            return  # the ledger's outbox holds it until the application asks
        self._mailbox(record.parent).put(Notification.of(record))

    def _relay(self, parent: str | None, message: Any) -> bool:
        """Tell ``message`` to the actor of a parent that relays to its process.

        False when there is no such parent, or it just ended: then the caller
        keeps the item in the parent's mailbox.
        """
        parent_actor = None if parent is None else self._actors.get(parent)
        if parent_actor is None or not self._relays(parent):
            return False
        try:
            parent_actor.tell(message)
        except pykka.ActorDeadError:
            return False
        return True

    def _relays(self, work_id: str | None) -> bool:
        if work_id is None:
            return False
        # The unit's own class: a kind's units may run in different classes (actor_for).
        ref = self._actors.get(work_id)
        actor_class = self.kinds.actor_class(work_id[0]) if ref is None else ref.actor_class
        return actor_class.relays_notifications
