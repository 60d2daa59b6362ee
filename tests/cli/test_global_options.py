"""``--state``, ``--ledger`` and ``--json`` are taken before the verb as after it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import workunits as wu
from tests.cli.conftest import one_line_error
from workunits._cli import Exit, cli
from workunits._cli._app import _verb_first


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env={"WORKUNITS_STATE": None})
    return result.exit_code, result.stdout, result.stderr


def test_state_and_json_before_the_verb_as_after_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.connect(state) as client:
        handle = client.shell("true")
    before = _run("--state", str(state), "--json", "ls")
    after = _run("ls", "--state", str(state), "--json")
    assert before[0] == after[0] == 0
    assert before[1] == after[1]
    assert [orjson.loads(line)["id"] for line in before[1].splitlines()] == [handle.id]
    assert _run(f"--state={state}", "show", handle.id)[0] == 0


def test_a_verb_without_the_option_says_so_as_after_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--ledger", "postgresql://x/y", "ls"])
    one_line_error(result, Exit.USAGE, "No such option '--ledger'; see cli ls --help")


@pytest.mark.parametrize(
    ("argv", "moved"),
    [
        (["--state", "s", "ls"], ["ls", "--state", "s"]),
        (["--json", "--state=s", "show", "a1"], ["show", "--json", "--state=s", "a1"]),
        (
            ["--ledger", "postgresql://h/db", "serve", "-c", "a=1"],
            ["serve", "--ledger", "postgresql://h/db", "-c", "a=1"],
        ),
        (["submit", "--state", "s", "--", "--json"], ["submit", "--state", "s", "--", "--json"]),
        (["--version"], ["--version"]),
        (["--state"], ["--state"]),  # no value, no verb: click's own error
        (["--state", "s"], ["--state", "s"]),  # no verb: click's own error
    ],
)
def test_the_shared_options_move_to_just_after_the_verb(argv: list[str], moved: list[str]) -> None:
    assert _verb_first(argv) == moved
