"""Hypothesis state machines that check the lifecycle invariants (DESIGN §2) after every step.

``LifecycleMachine`` is kind-agnostic: subclass it, implement ``submit_unit``
(and ``setup`` to register your kind), and the machine kills, cancels, reads,
retains, releases, advances a ``ManualClock``, ticks and takes notifications
in every order Hypothesis finds, checking after each step:

- every record change the supervisor emits is a step of the transition table,
  continues from the previous record *object* (nothing is written without an
  event, nothing in place), and never leaves a terminal status;
- each unit has exactly one terminal transition, and a terminal record has an
  end time, ``notified``, no output file on disk, and an eviction time exactly
  when it is not retained;
- the read offset equals the bytes the machine has read, which never exceed
  what the unit wrote, and reads return every byte once (``expected_output``);
- eviction follows the machine's own model of invariant 8, written apart from
  the implementation: a record leaves memory only in a tick, and only when
  the unit has ended, the machine has acknowledged its notice, the grace has
  passed since its end and no retain lease the machine holds is live; and a
  tick leaves no such record behind (unless a lease of it lapsed unreleased,
  which the supervisor notices only at its next look);
- a read of an evicted unit carries on from the ledger where memory stopped;
- a unit whose kill or cancel the supervisor accepted ends ``killed``, never
  ``completed`` or ``failed``;
- a notice handed back (a released claim) comes again, marked ``redelivered``;
  an acknowledged one never comes again; each unit has exactly one notice.

``ScriptedLifecycleMachine`` adds ``ScriptedWork`` units and their rules.

Threads: rules, invariants and teardown run in Hypothesis's (the test's)
thread; ``ChangeLog.on_change`` runs in the supervisor actor's thread.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from workunits._client.ledger_client import connect
from workunits._core.errors import InvalidArgument, NotFinished, NotRunning
from workunits._core.record import TAIL_BYTES, Notification, WorkRecord, storable_text
from workunits._core.retain import Retain
from workunits._core.status import Reason, Status, allowed, is_terminal
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.facade import Supervisor
from workunits.supervisor.handle import WorkHandle
from workunits.testing._clock import ManualClock
from workunits.testing._scripted import ScriptedDriver, ScriptSpec

# Supervisor options the machine sets itself (``LifecycleMachine.supervisor_options``).
_MACHINE_OPTIONS = frozenset(
    {"clock", "tick_interval", "eviction_grace", "install_signal_handlers"}
)


class ChangeLog:
    """Every ``(old, new)`` record change a supervisor emits, in order.

    ``on_change`` is a supervisor change subscriber: it runs in the supervisor
    actor's thread, right after each write, and only appends under a lock.
    """

    def __init__(self) -> None:
        # Guards _events; held for one append or one slice (O(1) work).
        self._lock = threading.Lock()
        self._events: list[tuple[WorkRecord | None, WorkRecord]] = []

    def on_change(self, old: WorkRecord | None, new: WorkRecord) -> None:
        with self._lock:
            self._events.append((old, new))

    def since(self, start: int) -> list[tuple[WorkRecord | None, WorkRecord]]:
        """The events from index ``start`` on (any thread)."""
        with self._lock:
            return self._events[start:]


@dataclass
class UnitModel:
    """What the machine knows about one unit it started."""

    id: str
    read: bytearray = field(default_factory=bytearray)
    retain: int = 0
    requested_end: Reason | None = None  # the first kill/cancel the supervisor accepted
    escalate_at: float | None = None  # a cancel's grace ends here (manual time)
    emitted: list[WorkRecord] = field(default_factory=list)  # every record the supervisor wrote
    terminal: WorkRecord | None = None  # the record of its one terminal transition
    evicted: bool = False
    notices: int = 0  # notices acknowledged by the machine
    acknowledged: bool = False
    released_claim: bool = False  # the machine handed its notice back once
    leases: dict[str, float] = field(default_factory=dict)  # lease ID -> when it lapses
    lapsed_lease: bool = False  # a lease ran out unreleased: eviction may lag one look


def may_evict(model: UnitModel, now: float, grace: float) -> bool:
    """The machine's own statement of invariant 8, for a unit it created (a root unit)."""
    terminal = model.terminal
    return (
        terminal is not None
        and terminal.ended_at is not None
        and model.acknowledged
        and now >= terminal.ended_at + grace
        and all(lapses <= now for lapses in model.leases.values())
    )


class LifecycleMachine(RuleBasedStateMachine):
    """Drive one supervisor (manual clock, no ticker) and check DESIGN §2 after every step.

    Subclasses implement ``submit_unit`` and may override ``setup`` (register a
    kind), ``expected_output`` (what a unit's output will be, when known) and
    ``on_teardown``. Extra rules that start units return ``self.track(handle)``
    and target ``LifecycleMachine.units``.
    """

    units = Bundle("units")

    eviction_grace: ClassVar[float] = 10.0
    wait_timeout: ClassVar[float] = 10.0
    """Real seconds a unit may take to end after a kill (or a cancel's escalation).

    A unit that takes longer fails the step, saying its kind hung; every later
    wait of the machine (Hypothesis replays and shrinks) then fails at once, and
    its supervisor's ``shutdown_grace`` is this too, so a hung kind costs one
    ``wait_timeout`` per replay at most, not ``wait_timeout`` and a 5 s close.
    For a kind you suspect, also leave out Hypothesis's shrinking (the guide)."""
    supervisor_options: ClassVar[Mapping[str, Any]] = {}
    """More ``Supervisor`` options (``concurrency``, ``kinds``, ``shutdown_grace``...).
    The machine sets the clock, ``tick_interval``, ``eviction_grace`` and signal
    handling itself: giving one of those here is refused."""

    _hung: ClassVar[str | None] = None  # set once a unit of this machine hung (see wait_timeout)

    def __init__(self) -> None:
        super().__init__()
        taken = sorted(set(self.supervisor_options) & _MACHINE_OPTIONS)
        if taken:
            raise InvalidArgument(
                f"supervisor_options may not set {taken}: the machine sets them (the clock, "
                f"its ticks, eviction_grace and signals are how it checks the lifecycle)"
            )
        self.clock = ManualClock()
        self.state_dir = Path(tempfile.mkdtemp(prefix="workunits-machine-"))
        options: dict[str, Any] = {"shutdown_grace": self.wait_timeout}  # a hung unit's cost
        options.update(self.supervisor_options)
        self.sup = Supervisor(
            self.state_dir,
            clock=self.clock,
            tick_interval=None,
            eviction_grace=self.eviction_grace,
            install_signal_handlers=False,
            **options,
        )
        self.changes = ChangeLog()
        self.sup._ask(rq.Subscribe(self.changes.on_change))
        self.mailbox = self.sup.notifications()
        self.models: dict[str, UnitModel] = {}
        self.retains: dict[str, Retain] = {}  # lease ID -> the handle the machine holds
        self._seen_events = 0
        try:
            self.setup()
        except BaseException:
            # Hypothesis tears down only a machine it could make: this one's
            # supervisor and state dir would outlive the test, one per example.
            self.sup.close()
            shutil.rmtree(self.state_dir, ignore_errors=True)
            raise

    # -- hooks -----------------------------------------------------------------

    def setup(self) -> None:
        """Prepare ``self.sup`` (e.g. ``register_kind``) before the first rule."""

    def submit_unit(self) -> WorkHandle:
        """Start one unit of the kind under test."""
        raise NotImplementedError("a LifecycleMachine subclass implements submit_unit()")

    def expected_output(self, work_id: str) -> bytes | None:
        """All the output ``work_id`` can ever write, if known; a unit cut short writes a prefix."""
        return None

    def on_teardown(self) -> None:
        """Extra checks after the supervisor has closed and every notice was counted."""

    # -- helpers for subclasses --------------------------------------------------

    def track(self, handle: WorkHandle) -> str:
        """Start modelling a unit the subclass submitted; returns its ID for the bundle."""
        # The change log may have met the unit first (its insert event).
        self.models.setdefault(handle.id, UnitModel(handle.id))
        return handle.id

    def settle(self, work_id: str) -> WorkRecord:
        """Wait (real time, up to ``wait_timeout``) until ``work_id`` is terminal.

        A unit still not ended then fails the step: its kind does not report the
        end of a killed unit (it hung). From then on this machine's waits fail at
        once, so Hypothesis's replays and shrinking do not wait again each time.
        """
        machine = type(self)
        record: WorkRecord | None = None
        if machine._hung is None:
            try:
                record = self.sup.wait(work_id, self.wait_timeout)
            except NotFinished as exc:
                machine._hung = (
                    f"{work_id} ({exc.record.kind}) was still {exc.record.status.value} "
                    f"{self.wait_timeout} s after it was killed"
                )
        if record is None:
            _fail_hung(machine)
        assert is_terminal(record.status), f"{work_id}: wait() returned it {record.status.value}"
        return record

    # -- rules -----------------------------------------------------------------

    @rule(target=units)
    def start(self) -> str:
        return self.track(self.submit_unit())

    @rule(unit=units)
    def kill(self, unit: str) -> None:
        model = self.models[unit]
        if model.evicted:
            assert self.sup.kill(unit) is False, "kill of an evicted unit is a no-op"
            return
        before = self.sup.get(unit)
        sent = self.sup.kill(unit)
        if is_terminal(before.status):
            assert not sent, f"kill of {before.status.value} {unit} returned True"
        if sent:
            model.requested_end = model.requested_end or Reason.KILLED
        self.settle(unit)
        assert self.sup.kill(unit) is False, "a second kill must be a no-op returning False"

    @rule(unit=units, grace=st.sampled_from([0.0, 1.0, 5.0]))
    def cancel(self, unit: str, grace: float) -> None:
        model = self.models[unit]
        if model.evicted:
            assert self.sup.cancel(unit, grace) is False, "cancel of an evicted unit is a no-op"
            return
        before = self.sup.get(unit)
        sent = self.sup.cancel(unit, grace)
        if is_terminal(before.status):
            assert not sent, f"cancel of {before.status.value} {unit} returned True"
        if sent:
            model.requested_end = model.requested_end or Reason.CANCELLED
            if model.escalate_at is None:
                model.escalate_at = self.clock.now() + grace

    @rule(unit=units)
    def read_output(self, unit: str) -> None:
        model = self.models[unit]
        model.read += self.sup.read_output(unit)  # from the ledger once evicted
        offset = self.sup.get(unit).output_offset
        assert offset == len(model.read), f"{unit}: offset {offset} after reading {len(model.read)}"

    @rule(unit=units, lease=st.sampled_from([1.0, 5.0, 30.0]))
    def retain(self, unit: str, lease: float) -> None:
        model = self.models[unit]
        handle = self.sup.retain(unit, lease=lease)
        assert handle.work_id == unit, f"retain({unit}) gave a lease on {handle.work_id}"
        self.retains[handle.lease_id] = handle
        model.leases[handle.lease_id] = self.clock.now() + lease

    @rule(data=st.data())
    def renew_a_retain(self, data: st.DataObject) -> None:
        if not self.retains:
            return
        lease_id = data.draw(st.sampled_from(list(self.retains)))  # not sorted: IDs are random
        handle = self.retains[lease_id]
        model = self.models[handle.work_id]
        now = self.clock.now()
        live = model.leases[lease_id] > now
        renewed = handle.renew()
        assert renewed == live, f"renew of a {'live' if live else 'lapsed'} lease gave {renewed}"
        if renewed:
            model.leases[lease_id] = now + handle.lease
        else:
            model.lapsed_lease = True
            del self.retains[lease_id]
            del model.leases[lease_id]

    @rule(data=st.data())
    def release_a_retain(self, data: st.DataObject) -> None:
        if not self.retains:
            return
        lease_id = data.draw(st.sampled_from(list(self.retains)))  # not sorted: IDs are random
        handle = self.retains.pop(lease_id)
        model = self.models[handle.work_id]
        if model.leases.pop(lease_id) <= self.clock.now():
            model.lapsed_lease = True  # it lapsed before this release
        handle.release()
        assert not handle.release(), "a second release must be a no-op"

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 5.0, 9.99, 10.0, 30.0]))
    def advance_and_tick(self, seconds: float) -> None:
        before = self.sup.resident_ids()
        now = self.clock.advance(seconds)
        evicted = self.sup.tick()
        resident = self.sup.resident_ids()
        after = {r.id: r for r in self.sup.list() if r.id in resident}
        gone = [work_id for work_id in before if work_id not in resident]
        assert evicted == len(gone), f"tick said {evicted} evicted, {len(gone)} left"
        self._check_new_events()
        grace = self.eviction_grace
        for work_id in gone:
            model = self.models[work_id]
            assert may_evict(model, now, grace), f"{work_id} was evicted while it had to stay"
            model.evicted = True
            # The ledger still answers for it, with the status it ended in.
            last = model.emitted[-1]
            read = self.sup.get(work_id).status
            assert read == last.status, f"{work_id} read {read.value} from the ledger, ended {last}"
        for record in after.values():
            model = self.models[record.id]
            if may_evict(model, now, grace) and not model.lapsed_lease:
                raise AssertionError(f"a tick left {record.id} in memory, though it may go")
        for model in self.models.values():
            due = model.escalate_at is not None and model.escalate_at <= now
            if due and not model.evicted:
                self.settle(model.id)  # the grace is over: SIGKILL went out on this tick

    @rule()
    def take_notifications(self) -> None:
        self._check_new_events()
        while (notice := self.mailbox.get_nowait()) is not None:
            if not isinstance(notice, Notification):
                continue  # not a terminal notice: other mailbox traffic is not ours to count
            self._count_notice(notice)

    def _count_notice(self, notice: Notification) -> None:
        model = self.models[notice.id]
        assert not model.acknowledged, f"{notice.id}: an acknowledged notice came again"
        assert notice.redelivered == model.released_claim, f"{notice.id}: redelivered is wrong"
        model.notices += 1
        model.acknowledged = True
        terminal = model.terminal or self._terminal_event(notice.id)
        assert terminal is not None, f"notice for {notice.id} before its terminal write"
        for name in ("status", "ended_at", "output_tail", "reason"):
            said, was = getattr(notice, name), getattr(terminal, name)
            assert said == was, f"{notice.id}: its notice says {name} {said!r}, its end {was!r}"

    @rule()
    def claim_a_notice_and_hand_it_back(self) -> None:
        self._check_new_events()
        held = self.mailbox.claim_nowait()
        if held is None:
            return
        notice = held.notice
        if isinstance(notice, Notification):
            model = self.models[notice.id]
            assert not model.acknowledged, f"{notice.id}: an acknowledged notice came again"
            assert notice.redelivered == model.released_claim, f"{notice.id}: redelivered wrong"
            model.released_claim = True
        assert held.release(), "a claim just taken could not be handed back"
        assert not held.ack(), "a released claim cannot be acknowledged"

    @rule()
    def notification_wait_times_out_when_empty(self) -> None:
        self._check_new_events()
        if not all(m.acknowledged or m.terminal is None for m in self.models.values()):
            return
        try:
            notice = self.mailbox.get(timeout=0)
        except TimeoutError:
            return
        # A unit (killed in real time) ended since the look: its notice is fine.
        assert isinstance(notice, Notification), f"an empty mailbox gave {notice!r}"
        self._count_notice(notice)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def lifecycle_holds(self) -> None:
        resident = self.sup.resident_ids()
        records = {r.id: r for r in self.sup.list() if r.id in resident}
        self._check_new_events()
        now = self.clock.now()
        for work_id, model in self.models.items():
            if model.evicted:
                assert work_id not in records, f"{work_id} came back after eviction"
                continue
            assert work_id in records, f"{work_id} left memory outside a tick"
            record = records[work_id]
            assert any(record is r for r in model.emitted), f"{work_id}: a write without an event"
            self._check_record(model, record, now)

    def _check_new_events(self) -> None:
        events = self.changes.since(self._seen_events)
        self._seen_events += len(events)
        for old, new in events:
            model = self.models.get(new.id)
            if model is None:  # submitted, but submit_unit has not returned yet
                model = self.models[new.id] = UnitModel(new.id)
            assert new is not old, "an event for a write that changed nothing"
            if old is None:
                assert not model.emitted, f"{new.id} was inserted twice"
                assert new.status == Status.PENDING, "units are inserted pending"
            else:
                assert model.emitted, f"{new.id} changed before it was inserted"
                assert old is model.emitted[-1], f"{new.id}: a write skipped its event"
                assert allowed(old.status, new.status), f"{old.status} -> {new.status}"
                if is_terminal(old.status):
                    assert new.status == old.status, "terminal is permanent"
                elif is_terminal(new.status):
                    assert model.terminal is None, f"{new.id} ended twice"
                    model.terminal = new
            model.emitted.append(new)

    def _check_record(self, model: UnitModel, record: WorkRecord, now: float) -> None:
        wid = record.id
        assert record.retain == model.retain, f"{wid}: retain {record.retain}, held {model.retain}"
        assert record.acknowledged == model.acknowledged, (
            f"{wid}: acknowledged {record.acknowledged}, the machine took its notice: "
            f"{model.acknowledged}"
        )
        assert record.output_offset == len(model.read), (
            f"{wid}: offset {record.output_offset}, the machine read {len(model.read)} bytes"
        )
        expected = self.expected_output(wid)
        if expected is not None:
            assert bytes(model.read) == expected[: len(model.read)], f"{wid}: output out of order"
        if not is_terminal(record.status):
            assert record.ended_at is None, f"{wid} is {record.status.value} with an end time"
            assert not record.notified, f"{wid} is {record.status.value}, yet notified"
            assert record.evict_after is None, f"{wid} is {record.status.value}, yet evictable"
            return
        assert record.ended_at is not None, f"{wid} ended {record.status.value} with no end time"
        assert record.notified, f"{wid}: the terminal transition notifies"
        assert model.notices <= 1, f"{wid} got {model.notices} notices"
        assert record.output_offset <= record.output_bytes, (
            f"{wid}: offset {record.output_offset} past its {record.output_bytes} bytes"
        )
        assert record.output_path is None or not _lexists(record.output_path), (
            f"{wid} ended, and its output file {record.output_path} is still there"
        )
        assert (record.retain > 0) == (record.evict_after is None), (
            f"{wid}: retain {record.retain} with evict_after {record.evict_after}"
        )
        if record.evict_after is not None:
            assert record.evict_after >= (record.ended_at or now), (
                f"{wid}: evictable at {record.evict_after}, before its end {record.ended_at}"
            )
        if expected is not None:
            assert record.output_bytes <= len(expected), (
                f"{wid} wrote {record.output_bytes} bytes, more than the {len(expected)} expected"
            )
            written = expected[: record.output_bytes]
            assert record.output_tail == written[-TAIL_BYTES:], f"{wid}: its output tail differs"
        if model.requested_end is not None:
            # The supervisor accepted a kill or cancel: the kind must report it so.
            assert record.status == Status.KILLED, (
                f"{record.id} ended {record.status.value} after an accepted "
                f"{model.requested_end.value}"
            )
        if record.status == Status.KILLED:
            assert record.reason is not None, f"{wid} was killed with no reason"
            assert record.reason == model.requested_end, (
                f"{record.id} killed for {record.reason}, but asked {model.requested_end}"
            )

    def _terminal_event(self, work_id: str) -> WorkRecord | None:
        self._check_new_events()
        return self.models[work_id].terminal

    # -- teardown ----------------------------------------------------------------

    def teardown(self) -> None:
        # Hypothesis calls this from a ``finally``: when a step already failed, only
        # clean up, so that failure is the one reported.
        failing = sys.exc_info()[1] is not None
        try:
            self.sup.close()
            if failing:
                return
            self._check_new_events()
            for model in self.models.values():
                assert model.terminal is not None, f"{model.id} outlived close()"
                if model.terminal.status == Status.KILLED and model.requested_end is None:
                    reason = model.terminal.reason
                    assert reason == Reason.SHUTDOWN, (
                        f"{model.id} was killed for {reason} at close, where nothing asked it"
                    )
            # The supervisor has gone; its notices wait in the ledger for any consumer.
            with connect(self.state_dir, create=False) as client:
                while (notice := client.notifications().get_nowait()) is not None:
                    self._count_notice(notice)
            for model in self.models.values():
                assert model.notices == 1, f"{model.id} got {model.notices} notifications"
            self.on_teardown()
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


class ScriptedLifecycleMachine(LifecycleMachine):
    """``LifecycleMachine`` over ``ScriptedWork`` units: write, exit, fail, ignore a cancel.

    Scripted units end only when a rule ends them, so the machine knows each
    unit's exact output and outcome.
    """

    scripted_letter: ClassVar[str] = "x"

    def setup(self) -> None:
        self.driver = ScriptedDriver(self.sup, self.scripted_letter, timeout=self.wait_timeout)
        self.written: dict[str, bytearray] = {}
        self.ignoring_cancel: set[str] = set()
        self.ended_by: dict[str, Status] = {}  # outcomes the machine chose with exit/fail

    def submit_unit(self) -> WorkHandle:
        return self._start_scripted(ScriptSpec())

    def _start_scripted(self, spec: ScriptSpec) -> WorkHandle:
        handle = self.driver.start(spec, description="scripted")
        self.written[handle.id] = bytearray()
        return handle

    def expected_output(self, work_id: str) -> bytes | None:
        written = self.written.get(work_id)
        return None if written is None else bytes(written)

    @rule(target=LifecycleMachine.units)
    def start_ignoring_cancel(self) -> str:
        handle = self._start_scripted(ScriptSpec(ignore_cancel=True))
        self.ignoring_cancel.add(handle.id)
        return self.track(handle)

    def _running_scripted(self, unit: str) -> bool:
        """True when ``unit`` is a scripted unit the supervisor still has running."""
        model = self.models[unit]
        if unit not in self.written:
            return False
        if model.evicted:
            _expect_not_running(lambda: self.driver.write(unit, b""))
            return False
        if model.requested_end is not None and unit not in self.ignoring_cancel:
            self.settle(unit)  # a cancel ends it, but asynchronously: let it land
        if is_terminal(self.sup.get(unit).status):
            _expect_not_running(lambda: self.driver.write(unit, b"late"))
            return False
        return True

    @rule(unit=LifecycleMachine.units, data=st.binary(min_size=0, max_size=64))
    def write(self, unit: str, data: bytes) -> None:
        if self._running_scripted(unit):
            wrote = self.driver.write(unit, data)
            assert wrote == len(data), f"{unit}: wrote {wrote} of {len(data)} bytes"
            self.written[unit] += data

    @rule(unit=LifecycleMachine.units, code=st.integers(0, 3))
    def exit(self, unit: str, code: int) -> None:
        if self._running_scripted(unit):
            record = self.driver.exit(unit, code)
            self.ended_by[unit] = self._status_for(unit, Status.COMPLETED if code == 0 else None)
            assert record.status == self.ended_by[unit], (
                f"{unit} exited {code} and ended {record.status.value}, not "
                f"{self.ended_by[unit].value}"
            )
            assert record.exit_code == code, (
                f"{unit} exited {code}, its record says {record.exit_code}"
            )

    @rule(unit=LifecycleMachine.units, error=st.text(min_size=1, max_size=16))
    def fail(self, unit: str, error: str) -> None:
        if self._running_scripted(unit):
            record = self.driver.fail(unit, error)
            self.ended_by[unit] = self._status_for(unit, None)
            assert record.status == self.ended_by[unit], (
                f"{unit} failed and ended {record.status.value}, not {self.ended_by[unit].value}"
            )
            # Ledgers cannot hold every str: a NUL or a lone surrogate is stored escaped.
            assert record.error == storable_text(error), f"{unit}: its error text changed"

    def _status_for(self, unit: str, status: Status | None) -> Status:
        """How a unit ends by itself: killed once a kill or cancel reached it."""
        if self.models[unit].requested_end is not None:
            return Status.KILLED
        return Status.FAILED if status is None else status

    @rule(unit=LifecycleMachine.units)
    def read_everything_once_ended(self, unit: str) -> None:
        """After the end, reads drain exactly the unread rest, then return nothing."""
        model = self.models[unit]
        if unit not in self.written or model.evicted:
            return
        if not is_terminal(self.sup.get(unit).status):
            return
        while chunk := self.sup.read_output(unit, max_bytes=7):
            model.read += chunk
        assert bytes(model.read) == bytes(self.written[unit]), (
            f"{unit}: reads gave {len(model.read)} bytes of the {len(self.written[unit])} written"
        )

    @invariant()
    def scripted_units_end_only_as_told(self) -> None:
        for work_id, model in self.models.items():
            terminal = model.terminal
            if work_id not in self.written or terminal is None:
                continue
            assert terminal.output_bytes == len(self.written[work_id]), (
                f"{work_id}: {terminal.output_bytes} bytes at its end, "
                f"{len(self.written[work_id])} written"
            )
            chosen = self.ended_by.get(work_id)
            if chosen is not None:
                assert terminal.status == chosen, (
                    f"{work_id} ended {terminal.status.value}, told to end {chosen.value}"
                )
            else:
                assert terminal.status == Status.KILLED, f"{work_id} ended by itself"


def _fail_hung(machine: type[LifecycleMachine]) -> NoReturn:
    """The failure of a machine whose kind hung: raised from here alone, so that
    Hypothesis sees one failure (not a flaky one) when later examples fail at once."""
    raise AssertionError(
        f"a hung kind: {machine._hung}. The kind does not report the end of a killed unit; "
        f"{machine.__name__}'s later waits fail at once instead of waiting again. "
        f"Fix the kind, or raise {machine.__name__}.wait_timeout if it is only slow"
    )


def _lexists(path: str) -> bool:
    return Path(path).is_symlink() or Path(path).exists()


def _expect_not_running(call: object) -> None:
    assert callable(call), f"{call!r} is not a call"
    try:
        call()
    except NotRunning:
        return
    raise AssertionError("expected NotRunning for an ended scripted unit")


def _expect_timeout(call: object) -> None:
    assert callable(call), f"{call!r} is not a call"
    try:
        call()
    except TimeoutError:
        return
    raise AssertionError("expected TimeoutError from an empty mailbox")
