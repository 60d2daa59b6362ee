"""Kinds: the prefix table, and users' own WorkActor classes."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.conftest import eventually
from tests.helpers import WAIT
from workunits import (
    InvalidWorkId,
    KindTaken,
    Notification,
    Outcome,
    Reason,
    SpecError,
    Status,
    Supervisor,
    SupervisorClosed,
    UnknownKind,
    WorkActor,
)
from workunits._util import outputfile
from workunits.actors import ProcessExited, ProcessLost, ProcessSpawnFailed, SpawnExec
from workunits.testing import ManualClock, ScriptedDriver, ScriptedWork


class EchoWork(WorkActor):
    """A user's kind in a dozen lines: writes its spec (bytes) and completes at once."""

    kind: ClassVar[str] = "echo"

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        if not isinstance(spec, bytes):
            raise SpecError("an echo unit needs bytes")

    def launch(self) -> None:
        fd = outputfile.create(self.unit.output_path)
        try:
            os.write(fd, self.unit.spec)
        finally:
            os.close(fd)
        self.finish(Outcome(Status.COMPLETED, exit_code=0))

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


class BrokenLaunch(WorkActor):
    kind: ClassVar[str] = "broken"

    def launch(self) -> None:
        raise ValueError("no such model: gpt-0")

    def signal_work(self, signum: int) -> None:
        raise AssertionError("never launched, never signalled")


def test_a_custom_kind_runs_under_its_letter(sup: Supervisor) -> None:
    sup.register_kind("e", EchoWork)
    unit = sup.submit("e", b"hello from a user kind", description="echo")
    assert unit.id.startswith("e")
    record = sup.wait(unit.id, WAIT)
    assert (record.kind, record.status) == ("echo", Status.COMPLETED)
    assert record.output_tail == b"hello from a user kind"
    assert sup.list(kind="e") == [record]
    assert sup.list(kind="echo") == [record]
    assert sup.list(kind="b") == []
    assert sup.notifications().get(timeout=WAIT).id == unit.id


def test_a_kind_whose_launch_raises_fails_the_unit_with_the_cause(sup: Supervisor) -> None:
    sup.register_kind("k", BrokenLaunch)
    record = sup.wait(sup.submit("k", None).id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error.startswith("could not start: ValueError: no such model: gpt-0")
    assert "Traceback" in record.error
    assert record.output_bytes == 0


def test_a_spec_the_kind_refuses_registers_nothing(sup: Supervisor) -> None:
    sup.register_kind("e", EchoWork)
    with pytest.raises(SpecError, match="needs bytes"):
        sup.submit("e", "not bytes")
    assert sup.list() == []


def test_a_taken_letter_is_refused(sup: Supervisor) -> None:
    sup.register_kind("e", EchoWork)
    with pytest.raises(KindTaken, match="already the echo kind"):
        sup.register_kind("e", ScriptedWork)


def test_the_session_letter_is_refused(shared_sup: Supervisor) -> None:
    with pytest.raises(KindTaken, match="session"):
        shared_sup.register_kind("s", EchoWork)


@pytest.mark.parametrize("letter", list("abtwmrd"))
def test_builtin_letters_are_refused_even_before_their_kind_exists(
    shared_sup: Supervisor, letter: str
) -> None:
    with pytest.raises(KindTaken):
        shared_sup.register_kind(letter, EchoWork)


class Impostor(EchoWork):
    """A user's kind that took a built-in kind's name."""

    kind: ClassVar[str] = "shell"


class Unnamed(EchoWork):
    kind = 42  # type: ignore[assignment]  # the bug under test


class OneLetter(EchoWork):
    kind: ClassVar[str] = "b"


@pytest.mark.parametrize("name", ["shell", "agent", "dream", "remote"])
def test_a_builtin_kinds_name_is_refused(shared_sup: Supervisor, name: str) -> None:
    """``sup.list(kind="shell")`` answered with the impostor's units."""
    impostor = type("Impostor", (EchoWork,), {"kind": name})
    with pytest.raises(KindTaken, match=f"kind name {name!r} is the built-in kind of prefix"):
        shared_sup.register_kind("g", impostor)
    with pytest.raises(UnknownKind):
        shared_sup.submit("g", b"")  # nothing was registered


def test_another_kinds_name_is_refused(sup: Supervisor) -> None:
    sup.register_kind("e", EchoWork)
    with pytest.raises(KindTaken, match="kind name 'echo' is the registered kind of prefix 'e'"):
        sup.register_kind("g", EchoWork)
    with pytest.raises(KindTaken, match="'shell'"):
        sup.register_kind("g", Impostor)
    assert sup.list(kind="shell") == []


@pytest.mark.parametrize("kind", [Unnamed, OneLetter])
def test_a_kind_name_that_is_no_name_is_refused(shared_sup: Supervisor, kind: type) -> None:
    """``kind = 42`` passed registration and failed every submit with an AttributeError."""
    with pytest.raises(SpecError, match="a kind's name is a str of two characters or more"):
        shared_sup.register_kind("g", kind)


@pytest.mark.parametrize("not_a_kind", [object, int, "EchoWork", None, lambda: None])
def test_only_work_actor_subclasses_are_kinds(shared_sup: Supervisor, not_a_kind: Any) -> None:
    with pytest.raises(SpecError, match="WorkActor subclass"):
        shared_sup.register_kind("e", not_a_kind)


@pytest.mark.parametrize("letter", ["", "ee", "E", "1", "é", None])
def test_a_kind_letter_is_one_lowercase_ascii_letter(shared_sup: Supervisor, letter: Any) -> None:
    with pytest.raises(InvalidWorkId):
        shared_sup.register_kind(letter, EchoWork)


@pytest.mark.parametrize("letter", ["z", "s"])
def test_submit_to_an_unregistered_letter_is_unknown_kind(
    shared_sup: Supervisor, letter: str
) -> None:
    with pytest.raises(UnknownKind):
        shared_sup.submit(letter, b"x")
    assert shared_sup.list() == []


def test_list_with_an_unknown_kind_is_unknown_kind(shared_sup: Supervisor) -> None:
    with pytest.raises(UnknownKind):
        shared_sup.list(kind="nope")


def test_kinds_belong_to_one_supervisor(sup: Supervisor, msup: Supervisor) -> None:
    ScriptedDriver(msup, "q")
    with pytest.raises(UnknownKind):
        sup.submit("q", None)
    ScriptedDriver(sup, "q")  # the same letter is free in another supervisor


def test_a_custom_kind_is_killed_through_its_signal_work(sup: Supervisor) -> None:
    drive = ScriptedDriver(sup, "y")
    unit = drive.start()
    assert sup.kill(unit.id) is True
    assert sup.wait(unit.id, WAIT).signal == signal.SIGKILL


class BuggyKill(ScriptedWork):
    """A kind with a bug in its kill path: signal_work raises."""

    kind: ClassVar[str] = "buggy"

    def signal_work(self, signum: int) -> None:
        raise RuntimeError("bug in the kind's kill path")


def test_a_kind_whose_handler_raises_fails_the_unit_instead_of_hanging_it(
    sup: Supervisor,
) -> None:
    sup.register_kind("y", BuggyKill)
    drive = ScriptedDriver(sup, "y", register=False)
    unit = drive.start()
    drive.write(unit.id, b"before the bug")
    assert sup.kill(unit.id) is True
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error.startswith(
        "the unit's actor failed: RuntimeError: bug in the kind's kill path"
    )
    assert "Traceback" in record.error
    assert record.output_tail == b"before the bug"
    assert sup.notifications().get(timeout=0).id == unit.id


class EndsWith(WorkActor):
    """A kind with a bug in its end: finishes with the status its spec names."""

    kind: ClassVar[str] = "ends-with"

    def launch(self) -> None:
        self.finish(Outcome(Status(self.unit.spec)))

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


@pytest.mark.parametrize("status", ["pending", "running"])
def test_an_end_that_is_not_an_end_fails_the_unit_instead_of_leaving_it_running(
    sup: Supervisor, status: str
) -> None:
    """Its actor had stopped: the unit ran on for ever, unkillable, and no notice came."""
    sup.register_kind("q", EndsWith)
    unit = sup.submit("q", status)
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error == (
        f"its kind (ends-with) reported an end with status {status}, which is not an end: "
        f"a bug in that kind"
    )
    assert sup.notifications().get(timeout=WAIT).id == unit.id


class FinishesWith(WorkActor):
    """A kind with a bug in its end: finishes with its spec, which is no Outcome."""

    kind: ClassVar[str] = "finishes-with"

    def launch(self) -> None:
        self.finish(self.unit.spec)

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


@pytest.mark.parametrize("end", ["done", None, Status.COMPLETED])
def test_an_end_that_is_not_an_outcome_fails_the_unit_instead_of_leaving_it_running(
    sup: Supervisor, end: Any
) -> None:
    """Its actor had stopped and the supervisor dropped the end (AttributeError on
    ``outcome.status``): the unit ran on for ever, and kill or cancel said False."""
    sup.register_kind("q", FinishesWith)
    unit = sup.submit("q", end)
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error == (
        f"its kind (finishes-with) reported {end!r} ({type(end).__name__}) as its end, "
        f"not an Outcome: a bug in that kind"
    )
    assert sup.notifications().get(timeout=WAIT).id == unit.id
    assert sup.kill(unit.id) is False  # ended: nothing to kill


class CompletesWhenKilled(ScriptedWork):
    """A kind that answers a kill by completing, with a reason of its choosing."""

    kind: ClassVar[str] = "stubborn"

    def signal_work(self, signum: int) -> None:
        self.finish(Outcome(Status.COMPLETED, exit_code=0, reason=Reason.TIMEOUT))


def test_an_accepted_kill_ends_killed_even_when_the_kind_says_completed(sup: Supervisor) -> None:
    sup.register_kind("y", CompletesWhenKilled)
    drive = ScriptedDriver(sup, "y", register=False)
    unit = drive.start()
    assert sup.kill(unit.id) is True
    record = sup.wait(unit.id, WAIT)
    assert (record.status, record.reason) == (Status.KILLED, Reason.KILLED)


class ExitCodeWork(WorkActor):
    """A kind that runs a command through the zygote, as the guide says, and ends at its exit."""

    kind: ClassVar[str] = "exitcode"

    def launch(self) -> None:
        fd = outputfile.create(self.unit.output_path)
        try:
            argv = ("sh", "-c", 'echo "$0"; exit 3', "from a user kind")
            request = SpawnExec(unit_id=self.unit.id, argv=argv, cwd=None, env=None)
            self.unit.zygote.spawn_exec(request, fd, self.process_watch())
        finally:
            os.close(fd)

    def signal_work(self, signum: int) -> None:
        self.unit.zygote.signal(self.unit.id, signum)

    def on_receive(self, message: Any) -> Any:
        match message:
            case ProcessExited(exit_code, signum):
                self.finish(self.outcome_for_exit(exit_code, signum))
            case ProcessSpawnFailed(error):
                self.finish(Outcome(Status.FAILED, error=error))
            case ProcessLost():
                self.finish(Outcome(Status.FAILED, error="lost"))
            case _:
                return super().on_receive(message)
        return None


class EndsOnTheReaper(ExitCodeWork):
    """The same command; its outcome is decided by ``end_on_exit``, on the Reaper thread."""

    kind: ClassVar[str] = "reaperend"

    def end_on_exit(self, exit_code: int | None, signum: int | None) -> Outcome:
        where = threading.current_thread().name
        return Outcome(Status.FAILED, exit_code=exit_code, signal=signum, error=f"ended in {where}")


class LaunchesEarly(WorkActor):
    """Writes the name of the thread its launch ran in, then completes."""

    kind: ClassVar[str] = "early"

    def launch_early(self) -> bool:
        return True

    def launch(self) -> None:
        fd = outputfile.create(self.unit.output_path)
        try:
            os.write(fd, threading.current_thread().name.encode())
        finally:
            os.close(fd)
        self.finish(Outcome(Status.COMPLETED, exit_code=0))

    def signal_work(self, signum: int) -> None:
        self.finish(self.outcome_for_exit(None, signum))


class Inline(WorkActor):
    """Says ``inline``: still loads and runs, on a thread of its own as every kind now."""

    kind: ClassVar[str] = "inline"
    inline: ClassVar[bool] = True
    handled_in: ClassVar[list[str]] = []

    def launch_early(self) -> bool:
        return True

    def launch(self) -> None:
        os.close(outputfile.create(self.unit.output_path))
        Inline.handled_in.append(f"launch: {threading.current_thread().name}")

    def signal_work(self, signum: int) -> None:
        Inline.handled_in.append(f"kill: {threading.current_thread().name}")
        self.finish(self.outcome_for_exit(None, signum))


def test_a_kind_that_says_inline_runs_and_is_killed_as_any_other(sup: Supervisor) -> None:
    """``inline`` changes nothing since unit actors use pykka's public API only."""
    sup.register_kind("n", Inline)
    Inline.handled_in.clear()
    unit = sup.submit("n", None)
    assert sup.kill(unit.id) is True
    record = sup.wait(unit.id, WAIT)
    assert (record.status, record.reason) == (Status.KILLED, Reason.KILLED)
    assert [where.split("-")[0] for where in Inline.handled_in] == [
        "launch: SupervisorActor",  # launch_early: before its thread starts
        "kill: Inline",  # its own thread, named by pykka after its class
    ]


def test_a_custom_kind_runs_a_process_through_the_zygote(sup: Supervisor) -> None:
    sup.register_kind("x", ExitCodeWork)
    record = sup.wait(sup.submit("x", None).id, WAIT)
    assert (record.status, record.exit_code) == (Status.FAILED, 3)
    assert record.output_tail == b"from a user kind\n"
    assert record.pid is not None  # told by the watch, before the exit


def test_end_on_exit_ends_the_unit_from_the_reaper_thread_once(sup: Supervisor) -> None:
    # The actor also reports an end at ProcessExited (outcome_for_exit): the first
    # report, the Reaper's, is the one that counts.
    sup.register_kind("y", EndsOnTheReaper)
    unit = sup.submit("y", None)
    record = sup.wait(unit.id, WAIT)
    assert (record.status, record.exit_code) == (Status.FAILED, 3)
    assert record.error == "ended in workunits-reaper"
    assert sup.notifications().get(timeout=WAIT).id == unit.id


def test_launch_early_runs_the_launch_in_the_supervisor_thread(sup: Supervisor) -> None:
    sup.register_kind("q", LaunchesEarly)
    record = sup.wait(sup.submit("q", None).id, WAIT)
    assert record.status == Status.COMPLETED
    assert record.output_tail.startswith(b"SupervisorActor")


class ExitsAsItIsKilled(WorkActor):
    """Its work ends by itself just as the supervisor accepts a kill.

    The end is reported from another thread, as the Reaper reports a shell's
    exit, before this actor has handled the Kill: it says ``completed``.
    """

    kind: ClassVar[str] = "racing"
    launched: ClassVar[dict[str, ExitsAsItIsKilled]] = {}

    def launch(self) -> None:
        ExitsAsItIsKilled.launched[self.unit.id] = self

    def signal_work(self, signum: int) -> None:
        """Nothing to signal: the work has ended already."""

    def cancel(self, reason: Reason = Reason.CANCELLED) -> None:
        """Likewise."""

    def end_by_itself(self) -> None:
        """The test's thread, as the Reaper's: the work's own end, unaware of the kill."""
        if self.claim_end():
            self.unit.report_end(self.unit.id, Outcome(Status.COMPLETED, exit_code=0))
        self.actor_ref.stop(block=False)


@pytest.mark.parametrize("ask", ["kill", "cancel"])
def test_a_kill_answered_true_ends_the_unit_killed_whatever_it_reports_after(
    sup: Supervisor, ask: str
) -> None:
    # The supervisor's answer decides: a unit whose kill or cancel it accepted ends
    # killed for that reason, even when its own report, racing the kill, says
    # completed (seen under load by the lifecycle machine with real shells).
    sup.register_kind("u", ExitsAsItIsKilled)
    unit = sup.submit("u", None)
    work = eventually(lambda: ExitsAsItIsKilled.launched.get(unit.id), what="the launch")
    accepted = sup.kill(unit.id) if ask == "kill" else sup.cancel(unit.id, grace=60)
    assert accepted is True
    work.end_by_itself()
    record = sup.wait(unit.id, WAIT)
    reason = Reason.KILLED if ask == "kill" else Reason.CANCELLED
    assert (record.status, record.reason, record.exit_code) == (Status.KILLED, reason, 0)
    notice = sup.notifications().get(timeout=WAIT)
    assert isinstance(notice, Notification)
    assert notice.status == Status.KILLED


class ChecksSlowly(EchoWork):
    """A kind whose ``validate_spec`` waits (what the guide says not to do)."""

    kind: ClassVar[str] = "slow-check"
    checking: ClassVar[threading.Event] = threading.Event()
    go_on: ClassVar[threading.Event] = threading.Event()
    where: ClassVar[str] = ""  # the thread it ran on

    @classmethod
    def validate_spec(cls, spec: Any) -> None:
        cls.checking.set()
        assert cls.go_on.wait(WAIT)  # released by the test
        cls.where = threading.current_thread().name


def test_validate_spec_runs_on_the_supervisors_thread_and_a_slow_one_is_named(
    state_dir: Path,
) -> None:
    """The guide said "the caller's thread"; a submit that outwaits ``ask_timeout``
    said the supervisor "did not answer", as if it had closed."""
    with Supervisor(state_dir, install_signal_handlers=False, ask_timeout=0.5) as sup:
        sup.register_kind("v", ChecksSlowly)
        with pytest.raises(SupervisorClosed) as refused:
            sup.submit("v", b"checked slowly")
        assert ChecksSlowly.checking.is_set()
        message = str(refused.value)
        assert "did not answer within 0.5 s (ask_timeout): it is not closed but busy" in message
        assert "the call may still take effect" in message
        ChecksSlowly.go_on.set()
        # Not closed: the submit took effect once the check ended, on the supervisor's thread.
        (record,) = eventually(lambda: sup.list(kind="v"), what="the slow submit")
        assert sup.wait(record.id, WAIT).status == Status.COMPLETED
        assert ChecksSlowly.where.startswith("SupervisorActor")


def test_a_supervisor_without_a_units_kind_reads_it_from_the_ledger(state_dir: Path) -> None:
    """Reads of a unit whose kind this supervisor has not registered raised UnknownKind,
    although ``list()`` showed it and ``wu.connect`` read it fine."""
    with Supervisor(state_dir, install_signal_handlers=False) as first:
        first.register_kind("e", EchoWork)
        done = first.submit("e", b"ended under the first supervisor")
        assert done.wait(timeout=WAIT).status == Status.COMPLETED
        first.notifications().get(timeout=WAIT)
    with Supervisor(state_dir, install_signal_handlers=False) as sup:
        record = sup.get(done.id)
        assert (record.kind, record.status) == ("echo", Status.COMPLETED)
        assert record.output_tail == b"ended under the first supervisor"
        assert sup.wait(done.id, timeout=WAIT) == record
        assert sup.result(done.id, timeout=WAIT) == record  # a kind with no value: its record
        assert sup.list(kind="echo") == [record]
        assert sup.kill(done.id) is False  # ended: a no-op, as for any ended unit
        assert sup.cancel(done.id) is False
        with pytest.raises(UnknownKind):
            sup.list(kind="echoes")  # a typo still reads as no such kind
        with pytest.raises(UnknownKind, match="no unit of the ledger has that ID"):
            sup.get("e00000000")  # and an ID nobody has, as before


def test_a_pending_unit_of_a_kind_not_registered_waits_for_it(tmp_path: Path) -> None:
    """Not failed lost: a supervisor started without the kind keeps it pending, and
    starts it once the kind is registered."""
    state = tmp_path / "state"
    first = Supervisor(state, kinds={"e": EchoWork}, install_signal_handlers=False)
    unit = first.submit("e", b"hello", not_before=0.2)
    first.close(deploy=True)  # left pending for the next supervisor
    # Its delay is over for this one: its ticks claim the unit at once.
    clock = ManualClock(start=time.time() + 3600)
    with Supervisor(state, clock=clock, tick_interval=None, install_signal_handlers=False) as sup:
        sup.tick()
        sup.tick()
        assert sup.get(unit.id).status is Status.PENDING  # not failed for its kind
        sup.register_kind("e", EchoWork)
        sup.tick()  # the next tick starts it
        record = sup.wait(unit.id, timeout=WAIT)
        assert record.status is Status.COMPLETED
