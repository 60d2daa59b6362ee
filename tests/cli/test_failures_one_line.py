"""Failures the state dir, click and stray bytes cause: one line on stderr and a documented code.

Also what the command line says when no supervisor holds the state dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import workunits as wu
from tests.cli.conftest import Run, one_line_error
from tests.cli.live import Serve
from tests.client_support import FakeSupervisor
from tests.conftest import eventually
from tests.foreign_user import User, as_user, give
from workunits._cli import Exit, cli
from workunits._core.status import Status

# -- click's own errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["show"], "Missing argument 'ID'; see "),  # the program's name, then `show --help`
        (["frobnicate"], "No such command 'frobnicate'; see "),
        (["ls", "--status", "done"], "'done' is not one of"),
        (["ls", "--frob"], "No such option '--frob'; see "),
        (["--frob"], "No such option '--frob'"),
        (["watch", "--interval", "0"], "Invalid value for '--interval'"),
    ],
)
def test_click_usage_errors_are_one_line_and_exit_2(
    run: Run, client: wu.Client, argv: list[str], needle: str
) -> None:
    one_line_error(run(*argv), Exit.USAGE, needle)


def test_a_file_as_the_state_dir_exits_6_in_one_line(run: Run, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for verb in (["ls"], ["submit", "--", "true"], ["serve"]):
        one_line_error(run(*verb, state=a_file), Exit.LEDGER, "is a file, not a directory")


def test_a_symlinked_state_dir_exits_6_in_one_line(run: Run, client: wu.Client) -> None:
    link = client.state_dir.with_name("link")
    link.symlink_to(client.state_dir)
    one_line_error(run("ls", state=link), Exit.LEDGER, "is a symlink")


def _ls_in_child(state: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["ls", "--state", str(state)])
    return result.exit_code, result.stderr


def test_an_unreadable_state_dir_exits_6_in_one_line(nobody: User, shared_dir: Path) -> None:
    state = shared_dir / "state"
    wu.connect(state).close()
    give(state, nobody)
    state.chmod(0o000)
    code, stderr = as_user(nobody, _ls_in_child, state)
    assert code == Exit.LEDGER, stderr
    (line,) = stderr.splitlines()
    assert line.startswith(f"workunits: the state dir {state} cannot be read by this user")


# -- bytes that are not UTF-8 ----------------------------------------------------


NOT_UTF8 = os.fsdecode(b"a\xffb")  # what Python makes of such an argument: a lone surrogate


def test_a_commands_non_utf8_bytes_reach_it_as_given(run: Run, client: wu.Client) -> None:
    submitted = run("submit", "-q", "--", "printf", "%s", NOT_UTF8)
    assert submitted.exit_code == Exit.OK, submitted.stderr
    work_id = submitted.stdout.strip()
    assert client.row(work_id).description == "printf %s 'a\\xffb'"
    serve = Serve(client.state_dir)
    try:
        assert run("wait", "--timeout", "30s", work_id).exit_code == Exit.OK
    finally:
        assert serve.stop() == 0
    assert client.get(work_id).output_tail == b"a\xffb"
    assert run("result", work_id).stdout_bytes == b"a\xffb"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["submit", "--key", NOT_UTF8, "--", "true"], "the key 'a\\xffb' holds bytes"),
        (["submit", "-d", NOT_UTF8, "--", "true"], "the description 'a\\xffb' holds bytes"),
        (["submit", "--agent", NOT_UTF8], "not an import reference"),
        (
            ["submit", "--agent", "json:dumps", "--args", f'["{NOT_UTF8}"]'],
            "--args at $[0]: 'a\\udcffb' holds bytes that are not UTF-8",
        ),
        (["ls", "--kind", NOT_UTF8], "'a\\xffb' holds bytes that are not UTF-8"),
    ],
)
def test_non_utf8_bytes_where_text_is_needed_are_refused_in_one_line(
    run: Run, client: wu.Client, argv: list[str], needle: str
) -> None:
    one_line_error(run(*argv), Exit.USAGE, needle)
    assert client.list() == []


def test_a_state_dir_whose_name_is_not_utf8_is_refused(run: Run, tmp_path: Path) -> None:
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/st\xffte"))
    one_line_error(run("submit", "--", "true", state=odd), Exit.LEDGER, "not UTF-8")


# -- a result whose class cannot be imported -------------------------------------


def test_a_result_whose_class_cannot_be_imported_exits_1_naming_it(
    run: Run, client: wu.Client, fake: FakeSupervisor, tmp_path: Path
) -> None:
    module = tmp_path / "vanishing_mod.py"
    module.write_text("class Point:\n    def __init__(self, x):\n        self.x = x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import vanishing_mod  # type: ignore[import-not-found]  # noqa: PLC0415

        work_id = client.agent("tests.test_client:add", 1, 2).id
        fake.start(work_id)
        fake.complete(work_id, vanishing_mod.Point(3))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("vanishing_mod", None)
    one_line_error(run("result", work_id), Exit.FAILED, "needs vanishing_mod.Point")
    with pytest.raises(wu.UnloadableValue) as caught:
        client.result(work_id)
    assert caught.value.name == "vanishing_mod.Point"


# -- liveness --------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_ls_show_and_wait_say_when_no_supervisor_holds_the_state_dir(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    fake.open_session()
    work_id = client.shell("make").id
    fake.start(work_id)
    assert "(no supervisor)" not in run("ls").stdout
    assert "(no supervisor)" not in run("show", work_id).stdout

    fake.die()  # as a SIGKILL leaves it: the row says running, the session row is open
    row = client.row(work_id)
    fake.ledger.attempts.write(work_id, attempt=row.attempt, pid=_dead_pid())

    assert "running (no supervisor)" in run("ls").stdout
    shown = run("show", work_id).stdout
    assert "running (no supervisor)" in shown
    assert "(gone: no such process)" in shown
    one_line_error(
        run("wait", "--timeout", "0", work_id), Exit.RUNNING, "still running (no supervisor)"
    )


def test_after_serve_is_sigkilled_ls_and_show_say_so(run: Run, client: wu.Client) -> None:
    work_id = client.shell(["sleep", "60"]).id
    serve = Serve(client.state_dir)
    try:
        eventually(lambda: client.row(work_id).pid, what="the unit to start")
        assert client.supervisor_running()
        assert "(no supervisor)" not in run("ls").stdout
    finally:
        assert serve.stop(signal.SIGKILL) == -signal.SIGKILL
    assert client.row(work_id).status is Status.RUNNING
    assert "running (no supervisor)" in run("ls").stdout
    # The zygote ends the unit's process when it sees its supervisor gone.
    eventually(lambda: "(gone: no such process)" in run("show", work_id).stdout or None)
    assert "running (no supervisor)" in run("show", work_id).stdout
