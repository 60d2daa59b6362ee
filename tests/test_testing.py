"""The public ``workunits.testing`` helpers: ManualClock and the scripted kind's driver."""

from __future__ import annotations

import math
import os
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from tests.helpers import WAIT
from workunits import (
    InvalidArgument,
    KindTaken,
    Reason,
    SpecError,
    Status,
    Supervisor,
    UnknownWork,
    WrongType,
)
from workunits._core.ids import mint
from workunits.testing import (
    LifecycleMachine,
    ManualClock,
    NotRunning,
    ScriptedDriver,
    ScriptedWork,
    ScriptSpec,
)

# -- ManualClock -------------------------------------------------------------------


def test_manual_clock_stands_still_until_moved() -> None:
    clock = ManualClock(100.0)
    assert clock.now() == clock.now() == 100.0
    assert clock.advance(2.5) == 102.5
    assert clock.now() == 102.5
    assert clock.set(200) == 200.0
    assert clock.now() == 200.0
    assert clock.advance(0) == 200.0


@pytest.mark.parametrize(
    "move",
    [
        lambda c: c.advance(-0.001),
        lambda c: c.set(99.0),
        lambda c: c.advance(math.nan),
        lambda c: c.advance(math.inf),
        lambda c: c.set(math.inf),
        lambda c: c.advance("1"),
        lambda c: c.advance(True),
    ],
)
def test_manual_clock_never_goes_backwards_or_to_nonsense(move: object) -> None:
    clock = ManualClock(100.0)
    with pytest.raises(InvalidArgument, match=r"backwards|finite"):  # also a ValueError
        move(clock)  # type: ignore[operator]
    assert clock.now() == 100.0


def test_manual_clock_is_thread_safe() -> None:
    clock = ManualClock(0.0)
    start = threading.Barrier(4)

    def advance_many() -> None:
        start.wait(WAIT)
        for _ in range(10_000):
            clock.advance(1)

    threads = [threading.Thread(target=advance_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert clock.now() == 40_000.0


def test_manual_clock_drives_record_times(msup: Supervisor, clock: ManualClock) -> None:
    drive = ScriptedDriver(msup)
    clock.set(2_000_000.0)
    unit = drive.start()
    assert msup.get(unit.id).created_at == 2_000_000.0
    clock.advance(7)
    record = drive.exit(unit.id, 0)
    assert (record.started_at, record.ended_at) == (2_000_000.0, 2_000_007.0)


# -- ScriptedDriver ----------------------------------------------------------------


def test_a_scripted_unit_runs_with_its_output_file_once_started(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start(description="demo")
    record = msup.get(unit.id)
    assert unit.id.startswith("x")
    assert (record.kind, record.status, record.description) == ("scripted", Status.RUNNING, "demo")
    assert record.output_path is not None
    assert os.path.exists(record.output_path)
    assert record.pid is None, "no OS process"


def test_write_is_on_disk_when_it_returns(msup: Supervisor, drive: ScriptedDriver) -> None:
    unit = drive.start()
    assert drive.write(unit.id, b"abc") == 3
    assert drive.write(unit, bytearray(b"de")) == 2  # a handle works as well as an ID
    path = msup.get(unit.id).output_path
    assert path is not None
    with open(path, "rb") as f:
        assert f.read() == b"abcde"


def test_exit_and_fail_return_the_terminal_record(drive: ScriptedDriver) -> None:
    ok, bad, broken = drive.start(), drive.start(), drive.start()
    assert drive.exit(ok.id).status == Status.COMPLETED
    failed = drive.exit(bad.id, 7)
    assert (failed.status, failed.exit_code) == (Status.FAILED, 7)
    crashed = drive.fail(broken.id, "ZeroDivisionError: division by zero")
    assert (crashed.status, crashed.error) == (Status.FAILED, "ZeroDivisionError: division by zero")


def test_commands_to_an_ended_unit_raise_not_running(drive: ScriptedDriver) -> None:
    unit = drive.start()
    drive.exit(unit.id, 0)
    for command in (
        lambda: drive.write(unit.id, b"late"),
        lambda: drive.exit(unit.id, 0),
        lambda: drive.fail(unit.id, "late"),
        lambda: drive.signals(unit.id),
    ):
        with pytest.raises(NotRunning, match="completed"):
            command()


def test_commands_to_an_unknown_unit_raise_unknown_work(drive: ScriptedDriver) -> None:
    with pytest.raises(UnknownWork):
        drive.write(mint("x"), b"?")


@pytest.mark.parametrize("data", ["text", 3, None])
def test_write_takes_only_bytes(drive: ScriptedDriver, data: object) -> None:
    unit = drive.start()
    with pytest.raises(WrongType, match="data must be bytes"):  # also a TypeError
        drive.write(unit.id, data)  # type: ignore[arg-type]


def test_exit_takes_only_an_int_code(drive: ScriptedDriver) -> None:
    unit = drive.start()
    with pytest.raises(WrongType, match="code must be an int"):
        drive.exit(unit.id, True)
    assert drive.signals(unit.id) == ()


def test_a_kill_ends_a_scripted_unit_at_once(msup: Supervisor, drive: ScriptedDriver) -> None:
    unit = drive.start()
    drive.write(unit.id, b"some")
    msup.kill(unit.id)
    record = msup.wait(unit.id, WAIT)
    assert (record.status, record.reason, record.signal) == (
        Status.KILLED,
        Reason.KILLED,
        signal.SIGKILL,
    )
    assert record.output_tail == b"some"


def test_a_cancel_ends_a_scripted_unit_at_once_unless_it_ignores_cancels(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    obedient = drive.start()
    stubborn = drive.start(ScriptSpec(ignore_cancel=True))
    msup.cancel(obedient.id, grace=30)
    msup.cancel(stubborn.id, grace=30)
    record = msup.wait(obedient.id, WAIT)
    assert (record.status, record.reason, record.signal) == (
        Status.KILLED,
        Reason.CANCELLED,
        signal.SIGTERM,
    )
    assert drive.signals(stubborn.id) == (signal.SIGTERM,)
    assert msup.get(stubborn.id).status == Status.RUNNING


def test_a_launch_error_fails_the_unit_before_it_runs(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    unit = drive.start(ScriptSpec(launch_error="no GPU"))
    record = msup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert record.error.startswith("could not start: RuntimeError: no GPU")
    with pytest.raises(NotRunning):
        drive.write(unit.id, b"x")


def test_the_scripted_kind_refuses_other_specs(msup: Supervisor, drive: ScriptedDriver) -> None:
    with pytest.raises(SpecError, match="ScriptSpec"):
        msup.submit("x", {"ignore_cancel": True})
    assert msup.list() == []


def test_a_driver_can_share_an_already_registered_letter(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    second = ScriptedDriver(msup, register=False)
    unit = second.start()
    assert drive.exit(unit.id, 0).status == Status.COMPLETED


class _SetupRaises(LifecycleMachine):
    """Its setup takes a built-in letter: refused, in the machine's constructor."""

    def setup(self) -> None:
        self.sup.register_kind("b", ScriptedWork)


def test_a_machine_whose_setup_raises_leaves_no_supervisor_or_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypothesis tears down only a machine it could make; each failed one leaked both."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(KindTaken):
        _SetupRaises()
    assert list(tmp_path.iterdir()) == []
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == [], left
