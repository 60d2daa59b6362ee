"""SupervisorActor: owns the registry, the kinds table, the mailboxes and the deadlines.

Every method runs in this actor's thread (pykka), so the registry needs no
locks. It never asks another actor anything: WorkActors, the Reaper and the
Ticker talk to it with tells, and it answers only the facade's asks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from workunits import _ids, _outputfile
from workunits._clock import Clock
from workunits._errors import SpecError, SupervisorClosed, UnknownWork
from workunits._ledger import Ledger
from workunits._mailbox import Mailbox
from workunits._record import Notification, Outcome, WorkRecord, replace
from workunits._status import Reason, Status, is_terminal
from workunits._wire.actor_messages import (
    Cancel,
    CheckpointReport,
    ControlChild,
    Escalate,
    Kill,
    ProgressReport,
    SpawnChild,
)
from workunits._wire.submits import check_submit, check_timeout
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper
from workunits.actors.base import UnitBinding, WorkActor
from workunits.supervisor.asks import PendingAsks
from workunits.supervisor.children import ChildRequests
from workunits.supervisor.durable import DurableSupervisor
from workunits.supervisor.endings import EndReport, TerminalTransition
from workunits.supervisor.kinds import Kinds
from workunits.supervisor.messaging import BetweenUnits, UnitMessaging
from workunits.supervisor.registry import Change, Registry
from workunits.supervisor.sweep import Deadlines, Due, evictable

log = logging.getLogger(__name__)

Subscriber = Callable[[WorkRecord | None, WorkRecord], None]
# A unit waiting for a slot: id, kind, spec, timeout, checkpoint.
Queued = tuple[str, type[WorkActor], Any, float | None, bytes | None]

OUTPUT_CAP_CHECK_EVERY = 1.0  # seconds between output-size checks of running units


@dataclass(frozen=True, slots=True)
class PidReport:
    work_id: str
    pid: int


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class Delivered:
    """A root notice was taken from the application's mailbox (from the consumer's thread)."""

    notice: Notification


class SupervisorActor(
    ChildRequests, TerminalTransition, UnitMessaging, DurableSupervisor, pykka.ThreadingActor
):
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
    ) -> None:
        super().__init__()
        self._init_durable(ledger, session)
        self.registry = Registry()
        self.kinds = kinds
        self._state_dir = state_dir
        self._output_dir = output_dir
        self._clock = clock
        self._reaper = reaper
        self._zygote = zygote
        self._grace = eviction_grace
        self._actors: dict[str, pykka.ActorRef[WorkActor]] = {}
        self._output_caps: dict[str, int] = {}
        # How each running unit is being ended: absent, "cancel", "kill" (or "stop": a teammate).
        self._ending: dict[str, str] = {}
        self._asks = PendingAsks()  # open asks to teammates (see messaging.py)
        self._read_fds: dict[str, int] = {}
        # The application's mailbox (key None) is made when first asked for, and
        # filled then from the ledger's outbox: a daemon nobody reads from holds
        # no notices in memory, and a late reader still gets every one.
        self._mailboxes: dict[str | None, Mailbox] = {}
        # The ledger hears of a change first (see _emit): whoever wakes on it may
        # tell another process, which reads the ledger, so the row must already say
        # it. (Waking waiters before the fsync would save ~1-2 ms per kill on this
        # disk, at the price of that stale read; consistency wins.)
        self._subscribers: list[Subscriber] = []
        # Ends reported back to back, made terminal in memory and not yet committed
        # (see _handle_receive): one fully synced transaction for the group.
        self._ending_batch: list[tuple[WorkRecord, WorkRecord, bool]] = []
        # Units waiting for a slot of their kind (FIFO), and the limits per kind name.
        self._limits = dict(concurrency or {})
        self._queued: dict[
            str, deque[tuple[str, type[WorkActor], Any, float | None, bytes | None]]
        ] = {}
        self._deadlines = Deadlines()
        self._next_cap_check = 0.0
        self._closing = False

    # -- tells from WorkActors, the Reaper and the Ticker ------------------------

    def on_receive(self, message: Any) -> Any:
        # A bad message must never stop the supervisor: log it and go on.
        try:
            match message:
                case EndReport(work_id, outcome):
                    self._end(work_id, outcome, group=True)
                case PidReport(work_id, pid):
                    self._write(work_id, lambda r: replace(r, pid=pid))
                case ProgressReport(work_id, fraction, text):
                    self._write(
                        work_id, lambda r: replace(r, progress=fraction, progress_message=text)
                    )
                case CheckpointReport(work_id, attempt, state):
                    self._save_checkpoint(work_id, attempt, state)
                case Delivered(notice):
                    self._mark_delivered(notice)
                case SpawnChild(parent, request):
                    self._spawn_child(parent, request)
                case ControlChild(parent, request):
                    self._control_child(parent, request)
                case _ if isinstance(message, BetweenUnits):
                    self._between_units(message)
                case Tick():
                    self.tick()
                case _:
                    log.warning("supervisor: unexpected message %r", message)
        except Exception:
            log.exception("supervisor: failed to handle %r", message)
        return None

    # -- the registration chokepoint ------------------------------------------

    def register(
        self,
        letter: str,
        spec: Any,
        *,
        parent: str | None = None,
        description: str = "",
        timeout: float | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
    ) -> WorkRecord:
        """Validate, write the ledger row, insert as ``pending``, start (invariant 4).

        With ``key``, a unit already submitted under it is returned instead,
        whatever its status (IdempotencyConflict if its spec differs).
        """
        if self._closing:
            raise SupervisorClosed("the supervisor is closing; it starts no new work")
        kind_class = self.kinds.actor_class(_ids.validate_letter(letter))
        kind_class.validate_spec(spec)
        actor_class = kind_class.actor_for(spec)
        check_submit(description=description, key=key, max_attempts=max_attempts)
        check_timeout(timeout)
        if parent is not None:
            parent_record = self._lookup(parent)
            if is_terminal(parent_record.status):
                raise SpecError(f"parent {parent} has already ended ({parent_record.status})")
        work_id = _ids.mint(letter)
        while work_id in self.registry:  # ~2.8e12 suffixes: practically never loops
            work_id = _ids.mint(letter)
        record = WorkRecord(
            id=work_id,
            kind=actor_class.kind,
            status=Status.PENDING,
            parent=parent,
            description=description,
            created_at=self._clock.now(),
            output_path=str(self._output_dir / f"{work_id}.out"),
        )
        # A unit that gets a slot now is written ``running`` by its submit: one
        # fully synced commit, not a submit and then a transition.
        starts_now = self._has_slot(actor_class.kind)
        existing = self._submit_durably(
            record, actor_class, spec, timeout, key, max_attempts, starts_now=starts_now
        )
        if existing is not None:
            found = self.registry.find(existing.id)
            return found if found is not None else existing.to_record()
        self._admit(record, actor_class, spec, timeout, running_in_ledger=starts_now)
        return self.registry.get(work_id)

    def _admit(
        self,
        record: WorkRecord,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        checkpoint: bytes | None = None,
        *,
        running_in_ledger: bool = False,
    ) -> None:
        """Insert a pending record and start it, or queue it for a slot of its kind.

        ``running_in_ledger``: the submit already wrote the row ``running`` (it
        found a slot, as this does in the same call).
        """
        self.registry.insert(record)
        self._emit(None, record)
        if not self._has_slot(actor_class.kind):
            queue = self._queued.setdefault(actor_class.kind, deque())
            queue.append((record.id, actor_class, spec, timeout, checkpoint))
            return
        self._start(
            record.id, actor_class, spec, timeout, checkpoint, running_in_ledger=running_in_ledger
        )

    def _has_slot(self, kind: str) -> bool:
        limit = self._limits.get(kind)
        return limit is None or self._running_of(kind) < limit

    def _running_of(self, kind: str) -> int:
        return sum(1 for work_id in self._actors if self.registry.get(work_id).kind == kind)

    def _start_queued(self, kind: str) -> None:
        queue = self._queued.get(kind)
        while queue and self._has_slot(kind):
            work_id, actor_class, spec, timeout, checkpoint = queue.popleft()
            record = self.registry.find(work_id)
            if record is not None and record.status == Status.PENDING:
                self._start(work_id, actor_class, spec, timeout, checkpoint)

    def _start(
        self,
        work_id: str,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        checkpoint: bytes | None = None,
        *,
        running_in_ledger: bool = False,
    ) -> None:
        now = self._clock.now()

        def running(r: WorkRecord) -> WorkRecord:
            return replace(r, status=Status.RUNNING, started_at=now)

        if running_in_ledger:  # memory catches up with the row; nothing to write
            old, record = self.registry.update(work_id, running)
            self._tell_subscribers(old, record)
        else:
            _, record = self._write(work_id, running)
        assert record.output_path is not None
        binding = UnitBinding(
            id=work_id,
            spec=spec,
            output_path=record.output_path,
            state_dir=str(self._state_dir),
            timeout=timeout,
            attempt=record.attempt,
            checkpoint=checkpoint,
            clock=self._clock,
            reaper=self._reaper,
            zygote=self._zygote,
            report_pid=self._report_pid,
            report_end=self._report_end,
            tell_supervisor=self.actor_ref.tell,
        )
        try:
            self._actors[work_id] = actor_class.start(binding)
        except Exception as exc:  # noqa: BLE001 - e.g. no thread could be started
            self._end(work_id, Outcome(Status.FAILED, error=f"could not start the unit: {exc!r}"))
            return
        if timeout is not None:
            self._deadlines.push(now + timeout, work_id, Due.TIMEOUT)
        cap = getattr(spec, "output_cap", None)
        if isinstance(cap, int):
            self._output_caps[work_id] = cap

    def _report_pid(self, work_id: str, pid: int) -> None:
        """Called from a WorkActor's thread."""
        self.actor_ref.tell(PidReport(work_id, pid))

    def _report_end(self, work_id: str, outcome: Outcome) -> None:
        """Called from a WorkActor's thread."""
        self.actor_ref.tell(EndReport(work_id, outcome))

    # -- the one update function and its change events -------------------------

    def update(self, work_id: str, change: Change) -> WorkRecord:
        return self._write(work_id, change)[1]

    def _write(self, work_id: str, change: Change) -> tuple[WorkRecord, WorkRecord]:
        old, new = self.registry.update(work_id, change)
        if new is not old:
            self._emit(old, new)
        return old, new

    def _emit(self, old: WorkRecord | None, new: WorkRecord) -> None:
        try:
            self._ledger_on_change(old, new)  # ledger errors are logged inside
        except Exception:
            log.exception("ledger: failed to mirror the change of %s", new.id)
        self._tell_subscribers(old, new)

    def _tell_subscribers(self, old: WorkRecord | None, new: WorkRecord) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(old, new)
            except Exception:
                log.exception("change subscriber %r failed", subscriber)

    def subscribe(self, subscriber: Subscriber) -> None:
        """``subscriber(old, new)`` runs in this thread after every write; it must not block."""
        self._subscribers.append(subscriber)

    def _mailbox(self, owner: str | None) -> Mailbox:
        if owner is None:
            return self.mailbox(None)
        mailbox = self._mailboxes.get(owner)
        if mailbox is None:
            mailbox = self._mailboxes[owner] = Mailbox(owner)
        return mailbox

    def _root_notice_taken(self, item: object) -> None:
        """Mailbox hook, in the consumer's thread: the ledger marks the notice delivered."""
        if isinstance(item, Notification):
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(Delivered(item))

    def mailbox(self, owner: str | None = None) -> Mailbox:
        if owner is not None:
            self._lookup(owner)
            return self._mailbox(owner)
        root = self._mailboxes.get(None)
        if root is None:
            root = self._mailboxes[None] = Mailbox(None, on_take=self._root_notice_taken)
            for notice in self._ledger.undelivered(None):
                root.put(notice)
        return root

    # -- kill and cancel, routed by prefix (invariant 9) -----------------------

    def kill(self, work_id: str, reason: Reason = Reason.KILLED) -> bool:
        if self._evicted(work_id):
            return False  # it ended long enough ago to leave memory: nothing to kill
        return self._kill(work_id, reason)

    def _evicted(self, work_id: str) -> bool:
        """Validate ``work_id``; True when only the ledger still knows it (UnknownWork if none)."""
        _ids.prefix_of(work_id, self.kinds)
        if work_id in self.registry:
            return False
        self._from_ledger(work_id)
        return True

    def _kill(self, work_id: str, reason: Reason) -> bool:
        record = self.registry.get(work_id)
        if record.status == Status.PENDING:
            self._end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        if record.status != Status.RUNNING or self._ending.get(work_id) == "kill":
            return False
        if not self._tell(work_id, Kill(reason)):
            return False  # it has ended; its report is queued behind this call
        self._ending[work_id] = "kill"
        return True

    def cancel(self, work_id: str, grace: float, reason: Reason = Reason.CANCELLED) -> bool:
        if self._evicted(work_id):
            return False
        record = self.registry.get(work_id)
        if record.status == Status.PENDING:
            self._end(work_id, Outcome(Status.KILLED, reason=reason))
            return True
        if record.status != Status.RUNNING or work_id in self._ending:
            return False
        if not self._tell(work_id, Cancel(reason)):
            return False  # it has ended; its report is queued behind this call
        self._ending[work_id] = "cancel"
        self._deadlines.push(self._clock.now() + grace, work_id, Due.ESCALATE)
        return True

    def _tell(self, work_id: str, message: Any) -> bool:
        """Send ``message`` to the unit's actor; False when it has already stopped."""
        ref = self._actors.get(work_id)
        if ref is None or not ref.is_alive():
            return False
        # A dead actor already reported its end, which is queued behind this call.
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            return False
        return True

    # -- reads -----------------------------------------------------------------

    def _lookup(self, work_id: str) -> WorkRecord:
        """The record in memory; UnknownWork (saying so) for one only the ledger still has."""
        if self._evicted(work_id):
            raise UnknownWork(
                f"{work_id} ended and has left memory: get() reads it from the ledger, "
                f"with its output tail; there is no live output or retention left to use"
            )
        return self.registry.get(work_id)

    def get(self, work_id: str) -> WorkRecord:
        """From memory, or from the ledger once the record was evicted (or never loaded)."""
        _ids.prefix_of(work_id, self.kinds)
        found = self.registry.find(work_id)
        return found if found is not None else self._from_ledger(work_id)

    def list_units(
        self,
        status: Status | None = None,
        kind: str | None = None,
        parent: str | None = None,
    ) -> list[WorkRecord]:
        kind_name = (
            None if kind is None else self.kinds.actor_class(self.kinds.letter_of(kind)).kind
        )
        if parent is not None:
            self.get(parent)
        in_memory = [
            r
            for r in self.registry
            if (status is None or r.status == status)
            and (kind_name is None or r.kind == kind_name)
            and (parent is None or r.parent == parent)
        ]
        return in_memory + self._ledger_rows(status, kind_name, parent)

    def read_output(self, work_id: str, max_bytes: int | None = None) -> tuple[bytes, WorkRecord]:
        """Read the delta since the offset, then patch only the offset (invariant 6)."""
        record = self._lookup(work_id)
        offset = record.output_offset
        fd = self._read_fds.get(work_id)
        if is_terminal(record.status) and fd is None:
            # The file is gone: what is left to read is in the tail, if it fits.
            data, new_offset = _from_tail(record, max_bytes)
        else:
            if fd is None and record.output_path is not None:
                fd = _outputfile.open_for_reading(record.output_path)
                if fd is not None:
                    self._read_fds[work_id] = fd
            data = b"" if fd is None else _outputfile.read_delta(fd, offset, max_bytes)
            new_offset = offset + len(data)
            if is_terminal(record.status) and fd is not None and new_offset >= record.output_bytes:
                os.close(self._read_fds.pop(work_id))
        if new_offset != offset:
            _, record = self._write(work_id, lambda r: replace(r, output_offset=new_offset))
        return data, record

    def unit_actor(self, work_id: str) -> pykka.ActorRef[WorkActor]:
        """The running unit's actor (for kinds' own control messages and tests)."""
        self._lookup(work_id)
        try:
            return self._actors[work_id]
        except KeyError:
            raise UnknownWork(f"{work_id} has no running actor") from None

    # -- retention and eviction (invariant 8) ----------------------------------

    def retain(self, work_id: str) -> WorkRecord:
        self._lookup(work_id)
        return self._write(work_id, lambda r: replace(r, retain=r.retain + 1, evict_after=None))[1]

    def release(self, work_id: str) -> WorkRecord:
        record = self._lookup(work_id)
        if record.retain == 0:
            return record
        now = self._clock.now()

        def release(r: WorkRecord) -> WorkRecord:
            left = r.retain - 1
            evict_after = (
                now + self._grace if left == 0 and is_terminal(r.status) else r.evict_after
            )
            return replace(r, retain=left, evict_after=evict_after)

        _, new = self._write(work_id, release)
        if new.retain == 0 and is_terminal(new.status):
            fd = self._read_fds.pop(work_id, None)
            if fd is not None:
                os.close(fd)
            if new.evict_after is not None:
                self._deadlines.push(new.evict_after, work_id, Due.EVICT)
        return new

    def tick(self) -> int:
        now = self._clock.now()
        evicted = 0
        for work_id, what in self._deadlines.pop_due(now):
            record = self.registry.find(work_id)
            if record is None:
                continue
            if what is Due.EVICT:
                if evictable(record, now):
                    self._evict(work_id)
                    evicted += 1
            elif record.status == Status.RUNNING:
                if what is Due.TIMEOUT:
                    self._kill(work_id, Reason.TIMEOUT)
                elif what is Due.ESCALATE and self._ending.get(work_id) == "cancel":
                    self._ending[work_id] = "kill"
                    self._tell(work_id, Escalate())
        if now >= self._next_cap_check:
            self._next_cap_check = now + OUTPUT_CAP_CHECK_EVERY
            self._check_output_caps()
        if not self._closing:
            self._durable_tick(now)
        return evicted

    def _check_output_caps(self) -> None:
        # Backs up the kernel's RLIMIT_FSIZE for work that ignores SIGXFSZ.
        for work_id, cap in list(self._output_caps.items()):
            record = self.registry.find(work_id)
            if record is None or record.output_path is None:
                continue
            if _outputfile.size_of(record.output_path) >= cap:
                self._kill(work_id, Reason.OUTPUT_CAP)

    def _evict(self, work_id: str) -> None:
        self.registry.remove(work_id)
        mailbox = self._mailboxes.pop(work_id, None)
        if mailbox is not None:
            mailbox.close()
        fd = self._read_fds.pop(work_id, None)
        if fd is not None:
            os.close(fd)

    # -- kinds -----------------------------------------------------------------

    def resident_ids(self) -> set[str]:
        return {r.id for r in self.registry}

    def gc(self, older_than: float | None = None) -> int:
        return self._ledger.gc(older_than)

    def register_kind(self, letter: str, actor_class: type[WorkActor]) -> None:
        self.kinds.add(letter, actor_class)

    # -- shutdown (invariant 10) -------------------------------------------------

    def begin_shutdown(self, deploy: bool = False) -> list[str]:
        """Refuse new work and kill all running work; return the IDs still ending.

        With ``deploy``, resumable running units and pending units are stopped
        without a terminal write: the next session resumes or starts them.
        """
        self._closing = True
        if deploy:
            for record in self.registry:
                if record.status == Status.PENDING or (
                    record.status == Status.RUNNING and self._resumable(record.id)
                ):
                    self._suspended.add(record.id)
        for record in self.registry:
            if not is_terminal(record.status):
                self._kill(record.id, Reason.SHUTDOWN)
        return [r.id for r in self.registry if not is_terminal(r.status)]

    def force_end(self, work_ids: list[str], error: str) -> None:
        """Record units that did not report their end in time as killed (shutdown)."""
        for work_id in work_ids:
            ref = self._actors.get(work_id)
            self._end(work_id, Outcome(Status.KILLED, reason=Reason.SHUTDOWN, error=error))
            if ref is not None:
                ref.stop(block=False)

    def on_stop(self) -> None:
        self._close_durable()
        self._fail_all_asks()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        for mailbox in self._mailboxes.values():
            mailbox.close()


def _from_tail(record: WorkRecord, max_bytes: int | None) -> tuple[bytes, int]:
    """Unread output of an ended unit whose file is gone: what the tail still holds.

    A reader that lagged more than the tail's 64 KiB resumes at the tail's start.
    """
    tail_start = record.output_bytes - len(record.output_tail)
    start = max(record.output_offset, tail_start)
    end = record.output_bytes if max_bytes is None else min(record.output_bytes, start + max_bytes)
    if end <= start:
        return b"", record.output_offset
    return record.output_tail[start - tail_start : end - tail_start], end
