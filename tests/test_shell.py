"""Shell units (kind ``b``) with real processes: exits, signals, limits, arguments, isolation."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    WAIT,
    children_of_this_process,
    first_int,
    kill_if_alive,
    process_gone,
    read_until,
)
from workunits import (
    Reason,
    SpecError,
    Status,
    Supervisor,
    WorkFailed,
    WorkKilled,
)
from workunits.testing import ManualClock


def test_exit_zero_completes_with_its_output(sup: Supervisor) -> None:
    unit = sup.shell("echo hello; echo oops >&2")
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.COMPLETED
    assert record.exit_code == 0
    assert record.signal is None
    assert record.reason is None
    assert record.error is None
    assert record.output_tail == b"hello\noops\n"
    assert record.kind == "shell"
    assert record.description == "echo hello; echo oops >&2"
    assert unit.id.startswith("b")
    assert sup.result(unit.id) == record


def test_a_nonzero_exit_fails_with_the_exit_code(sup: Supervisor) -> None:
    unit = sup.shell(["sh", "-c", "exit 3"])
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.exit_code == 3
    assert record.signal is None
    assert record.reason is None
    with pytest.raises(WorkFailed, match="exit code 3") as failed:
        sup.result(unit.id)
    assert failed.value.record == record


def test_a_signal_from_outside_fails_the_unit_with_that_signal(sup: Supervisor) -> None:
    unit = sup.shell("echo $$; exec sleep 30")
    pid = first_int(read_until(sup, unit.id, b"\n"))
    os.kill(pid, signal.SIGTERM)
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.signal == signal.SIGTERM
    assert record.exit_code is None
    assert record.reason is None
    assert record.pid == pid
    assert "SIGTERM" in record.describe_end()


def test_kill_ends_the_unit_killed_by_sigkill(sup: Supervisor) -> None:
    unit = sup.shell("echo $$; exec sleep 30")
    pid = first_int(read_until(sup, unit.id, b"\n"))
    assert sup.kill(unit.id) is True
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.KILLED
    assert record.signal == signal.SIGKILL
    assert process_gone(pid)
    with pytest.raises(WorkKilled, match="reason killed"):
        sup.result(unit.id)


def test_cancel_of_a_process_that_obeys_sigterm_needs_no_grace(msup: Supervisor) -> None:
    unit = msup.shell("echo $$; exec sleep 30")
    read_until(msup, unit.id, b"\n")
    assert msup.cancel(unit.id, grace=60.0) is True
    # No tick ever runs here: the SIGTERM alone ended it.
    record = msup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.CANCELLED
    assert record.signal == signal.SIGTERM


def test_cancel_of_a_process_that_traps_sigterm_kills_it_after_the_grace(
    msup: Supervisor, clock: ManualClock
) -> None:
    script = "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done"
    unit = msup.shell(script)
    read_until(msup, unit.id, b"ready\n")
    assert msup.cancel(unit.id, grace=5.0) is True
    read_until(msup, unit.id, b"got-term\n")  # SIGTERM arrived and was survived
    clock.advance(4.99)
    msup.tick()
    assert msup.get(unit.id).status == Status.RUNNING
    assert msup.cancel(unit.id, grace=5.0) is False, "a second cancel is a no-op"
    clock.advance(0.01)
    msup.tick()  # the grace is over: SIGKILL to the group
    record = msup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.CANCELLED
    assert record.signal == signal.SIGKILL


def test_a_timeout_kills_the_unit_with_reason_timeout(sup: Supervisor) -> None:
    unit = sup.shell(["sleep", "30"], timeout=0.2)
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.TIMEOUT
    assert record.signal == signal.SIGKILL


def test_a_timeout_runs_on_the_supervisor_clock(msup: Supervisor, clock: ManualClock) -> None:
    unit = msup.shell(["sleep", "30"], timeout=5)
    clock.advance(5)
    msup.tick()
    record = msup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.TIMEOUT


@pytest.mark.parametrize(
    "cmd",
    [["yes"], "yes", "yes | cat", "yes; echo done", "trap '' XFSZ; yes", "trap '' XFSZ; yes; true"],
    ids=["argv", "sh", "pipe", "list", "ignores-sigxfsz", "ignores-sigxfsz-exits-0"],
)
def test_output_beyond_the_cap_kills_the_unit_with_reason_output_cap(
    sup: Supervisor, cmd: Any
) -> None:
    cap = 64 * 1024
    unit = sup.shell(cmd, output_cap=cap)
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.KILLED
    assert record.reason == Reason.OUTPUT_CAP
    assert record.output_bytes >= cap
    assert set(record.output_tail) <= set(b"y\n")


def test_a_missing_command_fails_with_a_clear_error_but_has_an_id(sup: Supervisor) -> None:
    unit = sup.shell(["/nonexistent/definitely-not-a-command", "--flag"])
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert "command not found" in record.error
    assert "/nonexistent/definitely-not-a-command" in record.error
    assert record.pid is None
    assert sup.notifications().get(timeout=WAIT).id == unit.id


def test_a_command_that_is_not_executable_fails_with_permission_denied(
    sup: Supervisor, tmp_path: Path
) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o600)
    record = sup.wait(sup.shell([str(script)]).id, WAIT)
    assert record.status == Status.FAILED
    assert record.error is not None
    assert "permission denied" in record.error


BAD_SHELL_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("empty string", {"cmd": ""}),
    ("blank string", {"cmd": "   "}),
    ("empty argv", {"cmd": []}),
    ("int in argv", {"cmd": ["echo", 1]}),
    ("None in argv", {"cmd": ["echo", None]}),
    ("bytes cmd", {"cmd": b"echo hi"}),
    ("int cmd", {"cmd": 7}),
    ("NUL in argv", {"cmd": ["echo", "a\0b"]}),
    ("env value not str", {"cmd": "true", "env": {"A": 1}}),
    ("env name not str", {"cmd": "true", "env": {1: "x"}}),
    ("env name empty", {"cmd": "true", "env": {"": "x"}}),
    ("env name with =", {"cmd": "true", "env": {"A=B": "x"}}),
    ("env value with NUL", {"cmd": "true", "env": {"A": "x\0y"}}),
    ("env not a mapping", {"cmd": "true", "env": [("A", "b")]}),
    ("cwd missing", {"cmd": "true", "cwd": "/nonexistent/dir"}),
    ("cwd is a file", {"cmd": "true", "cwd": __file__}),
    ("negative timeout", {"cmd": "true", "timeout": -1}),
    ("zero timeout", {"cmd": "true", "timeout": 0}),
    ("nan timeout", {"cmd": "true", "timeout": float("nan")}),
    ("str timeout", {"cmd": "true", "timeout": "1"}),
    ("bool timeout", {"cmd": "true", "timeout": True}),
    ("zero output_cap", {"cmd": "true", "output_cap": 0}),
    ("negative output_cap", {"cmd": "true", "output_cap": -1}),
    ("float output_cap", {"cmd": "true", "output_cap": 1.5}),
    ("bool output_cap", {"cmd": "true", "output_cap": True}),
    ("description not str", {"cmd": "true", "description": 3}),
]


@pytest.mark.parametrize(
    ("why", "kwargs"), BAD_SHELL_ARGUMENTS, ids=[b[0] for b in BAD_SHELL_ARGUMENTS]
)
def test_bad_arguments_raise_spec_error_and_register_nothing(
    shared_sup: Supervisor, why: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(SpecError):
        shared_sup.shell(**kwargs)
    assert shared_sup.list() == []
    assert list((Path(shared_sup.state_dir) / "output").iterdir()) == []


def test_cwd_is_honoured(sup: Supervisor, tmp_path: Path) -> None:
    record = sup.wait(sup.shell(["pwd"], cwd=tmp_path).id, WAIT)
    assert record.output_tail.decode().strip() == str(tmp_path.resolve())


def test_env_replaces_the_environment(sup: Supervisor) -> None:
    env = {"WU_TEST_VALUE": "forty two", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    record = sup.wait(sup.shell('echo "$WU_TEST_VALUE|${HOME-unset}"', env=env).id, WAIT)
    assert record.output_tail == b"forty two|unset\n"


def test_stdin_is_dev_null(sup: Supervisor) -> None:
    record = sup.wait(sup.shell(["readlink", "/proc/self/fd/0"]).id, WAIT)
    assert record.output_tail == b"/dev/null\n"
    # A command that reads stdin sees end-of-file at once instead of hanging.
    assert sup.wait(sup.shell(["cat"]).id, WAIT).status == Status.COMPLETED


def test_the_command_inherits_only_stdin_stdout_and_stderr(sup: Supervisor) -> None:
    record = sup.wait(sup.shell("ls /proc/$$/fd").id, WAIT)
    assert record.output_tail.split() == [b"0", b"1", b"2"]


def test_the_output_file_is_0600_in_a_0700_directory(sup: Supervisor) -> None:
    unit = sup.shell("echo started; exec sleep 30")
    read_until(sup, unit.id, b"started")
    path = sup.get(unit.id).output_path
    assert path is not None
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sup.state_dir).st_mode) == 0o700
    assert Path(path).name == f"{unit.id}.out"
    sup.kill(unit.id)
    sup.wait(unit.id, WAIT)
    assert not os.path.lexists(path)


def test_background_jobs_of_a_shell_die_when_it_exits(sup: Supervisor) -> None:
    unit = sup.shell("sleep 30 & echo $!")
    record = sup.wait(unit.id, WAIT)
    assert record.status == Status.COMPLETED
    background = first_int(record.output_tail)
    try:
        assert process_gone(background), "the unit ended but its background job lives on"
    finally:
        kill_if_alive(background)


def test_kill_takes_the_whole_process_group_with_grandchildren(sup: Supervisor) -> None:
    unit = sup.shell("sh -c 'sleep 30 & echo $!; wait' & wait")
    grandchild = first_int(read_until(sup, unit.id, b"\n"))
    try:
        assert sup.kill(unit.id) is True
        assert sup.wait(unit.id, WAIT).status == Status.KILLED
        assert process_gone(grandchild), "a grandchild outlived the kill of its unit"
    finally:
        kill_if_alive(grandchild)


def test_an_ended_unit_leaves_no_zombie_child(sup: Supervisor) -> None:
    record = sup.wait(sup.shell("echo $$").id, WAIT)
    assert record.pid is not None
    assert record.pid not in children_of_this_process()
