"""``Starts``: the registration chokepoint (invariant 4), the queues per kind, and starting.

Owned by the SupervisorActor; every method runs in its thread.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from workunits._core import ids
from workunits._core.clock import Clock
from workunits._core.errors import SpecError, SupervisorClosed
from workunits._core.record import Outcome, WorkRecord, replace
from workunits._core.restart import Restart
from workunits._core.sandbox import Sandbox
from workunits._core.status import Status, is_terminal
from workunits._ledger import NewUnit, UnitRow
from workunits._pool import WorkerPool
from workunits._sandbox.isolation import Isolation, refuse_cwd_inside
from workunits._surface._generated import UnitOptions
from workunits._surface.submission import check_unit_options
from workunits._util import shell_log
from workunits._wire.specs import ShellSpec
from workunits._zygote.client import ZygoteClient
from workunits._zygote.reaper import Reaper
from workunits.actors.base import UnitBinding, WorkActor
from workunits.actors.kind_code import call_kind
from workunits.actors.warm_files import WarmFiles
from workunits.supervisor.actor.batches import Batches, BatchLimit
from workunits.supervisor.actor.deadlines import Deadlines, Due
from workunits.supervisor.actor.delays import Delays
from workunits.supervisor.actor.endings import EndsPerWake, TerminalTransition
from workunits.supervisor.actor.failed_writes import retryable
from workunits.supervisor.actor.ledger_mirror import LedgerMirror
from workunits.supervisor.actor.notices import RedeliverChildNotices
from workunits.supervisor.actor.slots import Launch
from workunits.supervisor.actor.tracing import UnitSpans
from workunits.supervisor.actor.unit_input import UnitInput
from workunits.supervisor.actor.units import Units

log = logging.getLogger(__name__)


class Registered(NamedTuple):
    """A submit's answer: the unit's record, and False when its key named an existing unit."""

    record: WorkRecord
    created: bool


@dataclass(frozen=True, slots=True)
class Prepared:
    """A submit validated, with its ID and row, waiting for its group's commit."""

    record: WorkRecord
    actor_class: type[WorkActor]
    spec: Any
    timeout: float | None
    starts_now: bool  # its row is written ``running``: it takes a slot of its kind
    new: NewUnit
    batch: BatchLimit | None = None  # its batch's own limit (``supervisor.actor.batches``)


@dataclass(frozen=True, slots=True)
class _Queued:
    """A unit waiting for a slot of its kind."""

    work_id: str
    actor_class: type[WorkActor]
    spec: Any
    timeout: float | None
    checkpoint: bytes | None


@dataclass(frozen=True, slots=True)
class Surroundings:
    """What every unit actor is started with, beside its own spec."""

    state_dir: Path
    output_dir: Path
    clock: Clock
    reaper: Reaper
    zygote: ZygoteClient
    tell_supervisor: Callable[[Any], None]  # a tell to the supervisor actor
    report_pid: Callable[[str, int], None]  # any thread; no message of its own (``pids``)
    pool: WorkerPool | None = None  # workers for pooled units
    files: WarmFiles | None = None  # output files made ahead of launches; None: at launch
    isolation: Isolation | None = None  # None: no policy is kept, nothing confined


class Starts:
    def __init__(
        self,
        *,
        units: Units,
        mirror: LedgerMirror,
        endings: TerminalTransition,
        deadlines: Deadlines,
        around: Surroundings,
        concurrency: Mapping[str, int] | None,
    ) -> None:
        self._units = units
        self._mirror = mirror
        self._endings = endings
        self._deadlines = deadlines
        self._around = around
        self._limits = dict(concurrency or {})  # running units per kind name
        self._queued: dict[str, deque[_Queued]] = {}  # FIFO per kind name
        self._delays: Delays[_Queued] = Delays()  # pending until their not_before
        self._batches: Batches[_Queued] = Batches()  # units held by their batch's limit
        self._closing = False
        self.spans: UnitSpans | None = None  # traces, when asked for (supervisor.tracing)
        self._report_end = EndsPerWake(around.reaper, around.tell_supervisor)

    def refuse_new_work(self) -> None:
        """Submits are refused and nothing more starts (a drain, a close)."""
        self._closing = True

    def register(
        self,
        letter: str,
        spec: Any,
        options: UnitOptions,
        *,
        retry_of: str | None = None,
        restart: Restart | None = None,
        trace: str | None = None,
    ) -> Registered:
        """Validate, write the ledger row, insert as ``pending``, start (invariant 4).

        With ``options.key``, a unit already submitted under it is returned
        instead, whatever its status (``created`` False; IdempotencyConflict if
        its spec differs). With ``retry_of`` (``retry(id)``), the failed unit's
        key moves to the new one. With ``options.not_before`` it stays pending
        until then. ``trace``: the span current where it was asked for
        (``supervisor.tracing``). A submit alone in its commit: the facade's go
        through ``supervisor.actor.submits``.
        """
        prepared = self.prepare(letter, spec, options, retry_of=retry_of, restart=restart)
        if self.spans is not None:
            self.spans.given(prepared.record.id, trace)  # its span's parent, if not its unit's
        (entered,) = self.enter([prepared])
        if isinstance(entered, BaseException):
            raise entered
        return entered

    def prepare(
        self,
        letter: str,
        spec: Any,
        options: UnitOptions,
        *,
        retry_of: str | None = None,
        restart: Restart | None = None,
        reserved: int = 0,
        batch: BatchLimit | None = None,
        batch_reserved: int = 0,
    ) -> Prepared:
        """Validate a submit and build its row; nothing is written or started yet.

        ``reserved``: slots of its kind that submits prepared before it, in the
        same group, take if they start at once (they are not running yet);
        ``batch_reserved`` likewise, of its batch's limit.
        """
        if self._closing:
            raise SupervisorClosed("the supervisor is closing; it starts no new work")
        self._mirror.ledger.check_in_place()  # LedgerGone: no new work (invariant 16)
        kinds = self._units.kinds
        kind_class = kinds.actor_class(ids.validate_letter(letter))
        # The kind's code, on this (the supervisor's) thread: contained (``kind_code``).
        call_kind(kind_class, kind_class.validate_spec, spec)
        actor_class = call_kind(kind_class, kind_class.actor_for, spec)
        if actor_class is not kind_class:  # the class that will run it has its own rules
            call_kind(actor_class, actor_class.validate_spec, spec)
        if isinstance(spec, ShellSpec) and spec.log is not None:
            # Only here is the state dir known; the launch checks again.
            shell_log.refuse_inside(spec.log, self._around.state_dir)
        if options.description is None:
            options = dataclasses.replace(options, description="")
        options = check_unit_options(options, self._around.clock.now())
        retry, max_attempts, parent = options.retry, options.max_attempts, options.parent
        if restart is not None and (retry is not None or max_attempts is not None):
            raise SpecError("a unit restarts or retries, not both: give restart= or retry=")
        if restart is not None and not actor_class.accepts_messages:
            raise SpecError(f"only teammates restart; a {actor_class.kind} unit takes retry=")
        start_at = options.not_before
        assert start_at is None or isinstance(start_at, float)  # check_unit_options made it so
        parent_policy = None
        if parent is not None:
            parent_record = self._units.lookup(parent)
            if is_terminal(parent_record.status):
                raise SpecError(f"parent {parent} has already ended ({parent_record.status})")
            parent_policy = parent_record.sandbox
        policy, unenforced = self._policy(actor_class, spec, options.sandbox, parent_policy)
        work_id = ids.mint(letter)
        while work_id in self._units:  # ~2.8e12 suffixes: practically never loops
            work_id = ids.mint(letter)
        record = WorkRecord(
            id=work_id,
            kind=actor_class.kind,
            status=Status.PENDING,
            parent=parent,
            description=options.description or "",
            created_at=self._around.clock.now(),
            output_path=str(self._around.output_dir / f"{work_id}.out"),
            retry=retry,
            retry_of=retry_of,
            stall_after=options.stall_after,
            restart=restart,
            not_before=start_at,
            sandbox=policy,
            unenforced=unenforced,
        )
        # A unit that gets a slot now is written ``running`` by its submit: one
        # fully synced commit, not a submit and then a transition.
        starts_now = (
            self._has_slot(actor_class.kind, reserved)
            and not self._delayed(record)
            and (batch is None or self._batches.has_room(batch, batch_reserved))
        )
        timeout = options.timeout
        new = self._mirror.new_unit(
            record, actor_class, spec, timeout, options.key, max_attempts, starts_now=starts_now
        )
        return Prepared(record, actor_class, spec, timeout, starts_now, new, batch)

    def with_policy(
        self, record: WorkRecord, actor_class: type[WorkActor], spec: Any
    ) -> WorkRecord:
        """A unit a client submitted through the ledger, under the policy it asked for,
        decided here as a submit's is (SpecError, SandboxUnavailable: it cannot start)."""
        policy, unenforced = self._policy(actor_class, spec, record.sandbox, None)
        return dataclasses.replace(record, sandbox=policy, unenforced=unenforced)

    def _policy(
        self,
        actor_class: type[WorkActor],
        spec: Any,
        asked: Sandbox | None,
        parent: Sandbox | None,
    ) -> tuple[Sandbox | None, tuple[str, ...]]:
        """The new unit's sandbox policy and what of it is not enforced (None: a kind that
        runs no process here); SpecError, SandboxEscalation or SandboxUnavailable."""
        isolation = self._around.isolation
        if not actor_class.sandboxed or isolation is None:
            if asked is not None:
                raise SpecError(
                    f"a {actor_class.kind} unit runs no process on this machine, so it takes "
                    f"no sandbox= (the Ray kinds are out of the sandbox's scope)"
                )
            return None, ()
        decided = isolation.decide(asked, parent)
        hidden = isolation.on and decided.policy.confined
        if hidden and isinstance(spec, ShellSpec) and spec.cwd is not None:
            refuse_cwd_inside(spec.cwd, self._around.state_dir)
        return decided.policy, decided.unenforced

    def enter(self, group: list[Prepared]) -> list[Registered | BaseException]:
        """Write the rows of ``group`` in one fully synced commit; then admit each new one.

        Nothing is in memory, and nothing starts, before its row is durable. Per
        submit: its record (the existing unit's when its key was taken), or its
        own error. A commit that failed for the ledger's moment (full, I/O,
        locked) raises and admits none; one that failed for what a row held is
        tried again one submit at a time, so only that submit fails.
        """
        news = [p.new for p in group]
        answers: list[UnitRow | BaseException | None]
        try:
            answers = list(self._mirror.submit_many(news))
        except Exception as exc:
            if len(group) == 1 or retryable(exc):
                raise
            log.warning("a group commit of %d submits failed (%s); one at a time", len(news), exc)
            answers = [self._submit_alone(new) for new in news]
        return self._admit_entered(group, answers)

    def register_written(
        self,
        letter: str,
        spec: Any,
        options: UnitOptions,
        *,
        write: Callable[[NewUnit], tuple[UnitRow, bool] | None],
    ) -> Registered | None:
        """``register``, its row written by ``write`` in a transaction of the caller's: a
        schedule's firing, with its compare-and-set and its record (``schedules``).

        ``write`` inserts the row (or finds the unit its key names) and says so as
        ``Ledger.units.submit`` does; None when it wrote nothing (another supervisor took
        the firing). Only then is the unit admitted, as ``enter`` admits.
        """
        prepared = self.prepare(letter, spec, options)
        answer = write(prepared.new)
        if answer is None:
            return None
        row, created = answer
        (entered,) = self._admit_entered([prepared], [None if created else row])
        if isinstance(entered, BaseException):
            raise entered
        return entered

    def _admit_entered(
        self, group: list[Prepared], answers: list[UnitRow | BaseException | None]
    ) -> list[Registered | BaseException]:
        """After the rows of ``group`` were written: admit each new one (``enter``)."""
        out: list[Registered | BaseException] = []
        for p, answer in zip(group, answers, strict=True):
            if isinstance(answer, BaseException):
                out.append(answer)
            elif answer is not None:  # its key was taken: the unit that has it
                found = self._units.registry.find(answer.id)
                out.append(Registered(found or answer.to_record(), created=False))
            else:
                self.admit(
                    p.record,
                    p.actor_class,
                    p.spec,
                    p.timeout,
                    running_in_ledger=p.starts_now,
                    batch=p.batch,
                )
                out.append(Registered(self._units.registry.get(p.record.id), created=True))
        return out

    def _submit_alone(self, new: NewUnit) -> UnitRow | BaseException | None:
        """One submit in a transaction of its own: its answer, or what it raised."""
        try:
            (answer,) = self._mirror.submit_many([new])
        except Exception as exc:  # noqa: BLE001 - its caller raises it
            return exc
        return answer

    def admit(
        self,
        record: WorkRecord,
        actor_class: type[WorkActor],
        spec: Any,
        timeout: float | None,
        checkpoint: bytes | None = None,
        *,
        running_in_ledger: bool = False,
        adopted: bool = False,
        batch: BatchLimit | None = None,
    ) -> None:
        """Insert a pending record and start it, or queue it for a slot of its kind
        (or of its ``batch``, which is asked first).

        ``running_in_ledger``: the submit already wrote the row ``running`` (it
        found a slot, as this does in the same call). ``adopted``: the unit came
        from the ledger (a client's submit, or a resume), not from this facade.
        """
        self._insert(record, Launch(actor_class, spec, timeout), adopted=adopted)
        if self._delayed(record):
            assert record.not_before is not None
            self._delays.hold(
                record.not_before, _Queued(record.id, actor_class, spec, timeout, checkpoint)
            )
            return
        queued = _Queued(record.id, actor_class, spec, timeout, checkpoint)
        if batch is not None and not self._batches.admit(
            record.id, batch, queued, forced=running_in_ledger
        ):
            return  # it waits for a place in its batch
        if not self._has_slot(actor_class.kind):
            self._queued.setdefault(actor_class.kind, deque()).append(queued)
            return
        self._start(queued, running_in_ledger=running_in_ledger)

    def ended(self, ended: WorkRecord) -> None:
        """A unit ended: the next units waiting for its batch's place or its kind's slot start."""
        self._batches.ended(ended.id, self._let_go)
        self.start_queued(ended.kind)

    def _let_go(self, work_id: str, unit: _Queued) -> bool:
        """Its batch lets a waiting unit go: start it, or queue it for its kind's slot.
        False when it ended while it waited (killed or cancelled pending)."""
        record = self._units.registry.find(work_id)
        if record is None or record.status != Status.PENDING:
            return False
        if self._has_slot(unit.actor_class.kind):
            self._start(unit)
        else:
            self._queued.setdefault(unit.actor_class.kind, deque()).append(unit)
        return True

    def _delayed(self, record: WorkRecord) -> bool:
        return record.not_before is not None and record.not_before > self._around.clock.now()

    def start_due(self) -> None:
        """Start (or queue for a slot) the delayed units whose ``not_before`` has come."""
        self._delays.release_due(self._around.clock.now(), self._start_delayed)

    def _start_delayed(self, unit: _Queued) -> None:
        record = self._units.registry.find(unit.work_id)
        if record is None or record.status != Status.PENDING:
            return  # cancelled (or killed) while it waited
        kind = unit.actor_class.kind
        if self._has_slot(kind):
            self._start(unit)
        else:
            self._queued.setdefault(kind, deque()).append(unit)

    def hold(self, record: WorkRecord, launch: Launch) -> None:
        """Insert a ``running`` record that waits between attempts (``supervisor.actor.retries``).

        A restarted supervisor's way in for a unit its dead session left waiting:
        like ``admit``, the registration chokepoint's, but nothing starts yet.
        """
        self._insert(record, launch, adopted=True)

    def _insert(self, record: WorkRecord, launch: Launch, *, adopted: bool) -> None:
        """The one place a record enters memory (invariant 4), with its slot filled in."""
        slot = self._units.insert(record)
        slot.adopted = adopted
        slot.launch = launch
        if getattr(launch.spec, "stdin", False) and not is_terminal(record.status):
            slot.input = UnitInput(record.id)  # send_input may queue before it starts

    def _has_slot(self, kind: str, reserved: int = 0) -> bool:
        if self._closing:
            return False  # draining or closing: what is admitted (adopted rows) waits
        limit = self._limits.get(kind)
        return limit is None or self._units.running_of(kind) + reserved < limit

    def start_queued(self, kind: str) -> None:
        """A unit of ``kind`` ended: start the next ones waiting, while slots are free."""
        queue = self._queued.get(kind)
        while queue and self._has_slot(kind):
            unit = queue.popleft()
            record = self._units.registry.find(unit.work_id)
            if record is not None and record.status == Status.PENDING:
                self._start(unit)

    def _start(self, unit: _Queued, *, running_in_ledger: bool = False) -> None:
        around = self._around
        now = around.clock.now()

        def running(r: WorkRecord) -> WorkRecord:
            return replace(r, status=Status.RUNNING, started_at=now)

        work_id = unit.work_id
        launch = Launch(unit.actor_class, unit.spec, unit.timeout)
        if running_in_ledger:  # memory catches up with the row; nothing to write
            old, record = self._units.registry.update(work_id, running)
            self._units.tell_subscribers(old, record)
        else:
            _, record = self._units.write(work_id, running)
            # Its attempt starts only once the ledger says so: a start the ledger never
            # recorded (the write is kept for a retry, or lost with the session) would
            # let the unit's next owner run the same attempt again.
            if self._mirror.when_status_lands(
                work_id, lambda: self._launch_if_waiting(work_id, launch, unit.checkpoint)
            ):
                slot = self._units.slot(work_id)
                if slot is not None:
                    slot.starting = True  # it holds its kind's slot meanwhile
                    self._units.holds_place(record.kind, work_id)
                return
        self.launch(record, launch, unit.checkpoint)

    def _launch_if_waiting(self, work_id: str, launch: Launch, checkpoint: bytes | None) -> None:
        """Its ``running`` write landed late: launch it, unless it ended meanwhile."""
        record = self._units.registry.find(work_id)
        slot = self._units.slot(work_id)
        if slot is not None:
            slot.starting = False
        if record is not None and record.status == Status.RUNNING and slot and slot.actor is None:
            self.launch(record, launch, checkpoint)

    def free_slots(self) -> dict[str, int] | None:
        """Per kind with a concurrency limit: how many more units could start now,
        counting those already queued here; None while closing (nothing starts).
        What this supervisor claims from the cluster's pending units (``claims``)."""
        if self._closing:
            return None
        return {
            kind: max(0, limit - self._units.running_of(kind) - len(self._queued.get(kind, ())))
            for kind, limit in self._limits.items()
        }

    def has_slot(self, kind: str) -> bool:
        """A unit of ``kind`` may start now (its kind's concurrency limit allows it)."""
        return self._has_slot(kind)

    def launch(self, record: WorkRecord, launch: Launch, checkpoint: bytes | None) -> None:
        """Start the actor of a ``running`` record: its first attempt, or its next one."""
        around = self._around
        now = around.clock.now()
        work_id = record.id
        assert record.output_path is not None
        tell = around.tell_supervisor
        slot = self._units.slot(work_id)
        assert slot is not None  # the record is in the registry
        binding = UnitBinding(
            id=work_id,
            spec=launch.spec,
            output_path=record.output_path,
            state_dir=str(around.state_dir),
            timeout=launch.timeout,
            attempt=record.attempt,
            checkpoint=checkpoint,
            clock=around.clock,
            reaper=around.reaper,
            zygote=around.zygote,
            report_pid=around.report_pid,
            report_end=self._report_end,
            tell_supervisor=tell,
            pool=None if around.pool is None else around.pool.for_policy(record.sandbox),
            files=around.files,
            traceparent=None if self.spans is None else self.spans.traceparent(work_id),
            input_fd=None if slot.input is None else slot.input.read_fd,
            sandbox=record.sandbox,
            isolation=around.isolation,
        )
        slot.quiet_since = slot.output_checked_at = now
        slot.stalled = False
        try:
            # A kind that launches early has its process on the way before this
            # returns; the thread start that follows is no longer on its path.
            slot.actor = launch.actor_class.start(binding)
            self._units.holds_place(record.kind, work_id)
        except Exception as exc:  # noqa: BLE001 - e.g. no thread could be started
            # The work may have been launched already; nobody would own it now.
            around.zygote.signal(work_id, signal.SIGKILL)
            if binding.pool is not None:  # a pooled unit's reserved place in the queue
                binding.pool.withdraw(work_id)
            error = f"could not start the unit: {exc!r}"
            self._endings.end(work_id, Outcome(Status.FAILED, error=error))
            return
        if record.attempt > 1 and launch.actor_class.relays_notifications:
            # Its children's notices that an earlier attempt was sent died with it.
            around.tell_supervisor(RedeliverChildNotices(work_id))
        slot.timeout_at = None
        if launch.timeout is not None:
            # Per attempt: an earlier attempt's deadline left in the queue is stale.
            slot.timeout_at = now + launch.timeout
            self._deadlines.push(slot.timeout_at, work_id, Due.TIMEOUT)
        cap = getattr(launch.spec, "output_cap", None)
        if isinstance(cap, int):
            slot.output_cap = cap
