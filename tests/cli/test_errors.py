"""Every error a person can cause is one line on stderr and a named exit code, never a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import workunits as wu
from tests.cli.conftest import Run, one_line_error
from workunits._cli import Exit
from workunits._ledger.sqlite.schema import SCHEMA_VERSION

ID_VERBS = [
    ["show"],
    ["tail"],
    ["tail", "-f"],
    ["wait"],
    ["result"],
    ["cancel"],
    ["kill"],
]
READ_VERBS = [*ID_VERBS, ["ls"], ["watch", "--once"], ["gc"]]


def _argv(verb: list[str], work_id: str = "b00000000") -> list[str]:
    return [*verb, work_id] if verb in ID_VERBS else verb


def test_the_exit_codes_have_their_documented_values() -> None:
    assert {code.name: int(code) for code in Exit} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "KILLED": 3,
        "RUNNING": 4,
        "UNKNOWN": 5,
        "LEDGER": 6,
        "BUSY": 7,
        "INTERRUPTED": 130,
    }


@pytest.mark.parametrize("verb", ID_VERBS, ids=" ".join)
def test_a_malformed_id_is_a_usage_error(run: Run, client: wu.Client, verb: list[str]) -> None:
    one_line_error(run(*verb, "../../etc"), Exit.USAGE, "is not a work unit ID")


@pytest.mark.parametrize("verb", ID_VERBS, ids=" ".join)
def test_an_unknown_id_exits_5(run: Run, client: wu.Client, verb: list[str]) -> None:
    one_line_error(run(*verb, "b00000000"), Exit.UNKNOWN, "no unit b00000000")


@pytest.mark.parametrize("verb", READ_VERBS, ids=" ".join)
def test_a_state_dir_without_a_ledger_exits_6_and_stays_empty(
    run: Run, tmp_path: Path, verb: list[str]
) -> None:
    nowhere = tmp_path / "typo"
    one_line_error(run(*_argv(verb), state=nowhere), Exit.LEDGER, "holds no workunits ledger")
    assert not nowhere.exists()


@pytest.mark.parametrize("verb", READ_VERBS, ids=" ".join)
def test_a_ledger_of_a_newer_schema_exits_6(run: Run, state_dir: Path, verb: list[str]) -> None:
    wu.connect(state_dir).close()
    conn = sqlite3.connect(state_dir / "ledger.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    one_line_error(run(*_argv(verb)), Exit.LEDGER, "written by a newer workunits")


def test_a_file_that_is_not_a_ledger_exits_6(run: Run, state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "ledger.db").write_bytes(b"this is not SQLite" * 100)
    one_line_error(run("ls"), Exit.LEDGER, "not an SQLite database")


def test_the_state_dir_comes_from_the_option_or_the_environment(
    run: Run, client: wu.Client, tmp_path: Path
) -> None:
    handle = client.shell("true")
    assert handle.id in run("ls").stdout  # WORKUNITS_STATE
    other = tmp_path / "other"
    wu.connect(other).close()
    assert handle.id not in run("ls", "--state", str(other)).stdout


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["wait", "--timeout", "soon", "b00000000"], "not a duration"),
        (["gc", "--older-than", "-3d"], "not a duration"),
        (["submit"], "nothing to run"),
        (["submit", "--agent", "json:dumps", "--args", "{"], "--args is not valid JSON"),
        (["submit", "--agent", "json:dumps", "--args", "{}"], "--args must be a JSON list"),
        # Exact JSON only: orjson once made a float of an integer beyond 64 bits.
        (
            ["submit", "--agent", "json:dumps", "--args", "[18446744073709551617]"],
            "--args at $[0]: 18446744073709551617 is an integer beyond 64 bits",
        ),
        (["submit", "--agent", "json:dumps", "--args", "[1e400]"], "--args at $[0]: inf"),
        (["submit", "--agent", "json:dumps", "--args", "[NaN]"], "NaN is not JSON"),
        (
            ["submit", "--agent", "json:dumps", "--kwargs", '{"n": Infinity}'],
            "Infinity is not JSON",
        ),
        (["submit", "--agent", "json:dumps", "--", "ls"], "takes no command"),
        (["submit", "--args", "[]", "--", "ls"], "go with --agent"),
        (["submit", "--agent", "not-a-ref"], "not an import reference"),
        (["submit", "--env", "NOEQUALS", "--", "ls"], "NAME=VALUE"),
        (
            ["submit", "--timeout", "0", "--", "ls"],
            "timeout must be a finite number of seconds > 0",
        ),
        (
            ["cancel", "--grace", "inf", "b00000000"],
            "grace must be a finite number of seconds >= 0",
        ),
        (
            ["cancel", "--grace", "nan", "b00000000"],
            "grace must be a finite number of seconds >= 0",
        ),
        (["watch", "--interval", "nan"], "interval must be a finite number of seconds >= 0.05"),
        (["ls", "--kind", "Shell"], "no kind 'Shell': it is not built in"),
        (["serve", "--drain-timeout", "inf"], "drain_timeout must be a finite number of seconds"),
    ],
)
def test_bad_arguments_are_usage_errors(
    run: Run, client: wu.Client, argv: list[str], needle: str
) -> None:
    one_line_error(run(*argv), Exit.USAGE, needle)
    assert client.list() == []


def test_an_idempotency_conflict_is_a_usage_error(run: Run, client: wu.Client) -> None:
    client.shell("true", key="k")
    one_line_error(run("submit", "--key", "k", "--", "false"), Exit.USAGE, "other arguments")


def test_click_usage_errors_keep_exit_code_2(run: Run, client: wu.Client) -> None:
    assert run("show").exit_code == Exit.USAGE  # missing ID
    assert run("frobnicate").exit_code == Exit.USAGE
    assert run("ls", "--status", "done").exit_code == Exit.USAGE
