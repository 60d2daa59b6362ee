"""``workunits submit``: shell commands and callables become pending rows, printed by ID."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from tests.cli.conftest import Run, one_line_error
from tests.client_support import FakeSupervisor
from workunits._cli import Exit


def _spec(client: wu.Client, work_id: str) -> dict[str, Any]:
    spec = client.ledger.units.load_spec(work_id)
    assert isinstance(spec, dict)
    return spec


def test_submit_creates_the_ledger_and_prints_the_id(run: Run, state_dir: Path) -> None:
    result = run("submit", "--", "make", "test")
    assert result.exit_code == Exit.OK
    work_id = result.stdout.strip()
    assert wu.is_valid_id(work_id)
    assert work_id.startswith("b")
    assert "no supervisor is running" in result.stderr
    with wu.connect(state_dir, create=False) as client:
        row = client.row(work_id)
        assert row.description == "make test"
        assert _spec(client, work_id)["argv"] == ["make", "test"]


def test_one_word_runs_through_the_shell(run: Run, client: wu.Client) -> None:
    work_id = run("submit", "-q", "--", "make test | tee log").stdout.strip()
    assert _spec(client, work_id)["argv"] == ["/bin/sh", "-c", "make test | tee log"]


def test_submit_options_reach_the_spec(run: Run, client: wu.Client, tmp_path: Path) -> None:
    result = run(
        "submit",
        "--quiet",
        "--key",
        "k1",
        "-d",
        "the tests",
        "--timeout",
        "15m",
        "--cwd",
        str(tmp_path),
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--on-lost",
        "restart",
        "--",
        "make",
    )
    assert result.stderr == ""
    (work_id,) = result.stdout.split()
    row = client.row(work_id)
    assert (row.key, row.description, row.resumable) == ("k1", "the tests", True)
    spec = _spec(client, work_id)
    assert spec["timeout"] == 900.0
    assert spec["cwd"] == str(tmp_path)
    assert spec["env"] == {"A": "1", "B": "x=y"}


def test_submit_an_agent_by_reference(run: Run, client: wu.Client) -> None:
    result = run(
        "submit",
        "--agent",
        "tests.test_client:add",
        "--args",
        "[1]",
        "--kwargs",
        '{"b": 2}',
        "--max-attempts",
        "5",
        "--json",
    )
    doc = json.loads(result.stdout)
    assert doc["created"] is True
    assert doc["status"] == "pending"
    row = client.row(doc["id"])
    assert row.kind == "agent"
    assert (row.max_attempts, row.resumable) == (5, True)


def test_the_same_key_prints_the_existing_unit(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    first = run("submit", "-q", "--key", "job", "--", "true").stdout.strip()
    fake.open_session()  # a supervisor runs: no "pending" hint
    again = run("submit", "--key", "job", "--", "true")
    assert again.stdout.strip() == first
    assert "existing unit" in again.stderr
    assert json.loads(run("submit", "--json", "--key", "job", "--", "true").stdout) == {
        "id": first,
        "created": False,
        "status": "pending",
    }
    fresh = run("submit", "--", "true")
    assert fresh.stderr == ""


def test_submit_not_before_keeps_the_unit_pending_that_long(run: Run, client: wu.Client) -> None:
    before = time.time()
    result = run("submit", "-q", "--not-before", "90s", "--", "true")
    assert result.exit_code == 0
    row = client.row(result.stdout.strip())
    assert row.status is wu.Status.PENDING
    assert row.not_before is not None
    assert before + 90 <= row.not_before <= time.time() + 90
    agent = run("submit", "-q", "--not-before", "2m", "--agent", "tests.upgrade_jobs:done")
    assert client.row(agent.stdout.strip()).not_before is not None


# -- a shell's kept output (--log, --keep-output) ------------------------------------


def test_submit_log_is_stored_as_an_absolute_path(
    run: Run, client: wu.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    work_id = run("submit", "-q", "--log", "build.log", "--", "make").stdout.strip()
    assert _spec(client, work_id)["log"] == str(tmp_path / "build.log")
    kept = run("submit", "-q", "--keep-output", "--", "make").stdout.strip()
    assert _spec(client, kept)["keep_output"] is True
    assert "log" not in _spec(client, kept)
    assert not (tmp_path / "build.log").exists()  # a submit writes nothing; the launch does


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log", "x.log", "--keep-output", "--", "true"], "not both"),
        (["--log", "no/such/dir/x.log", "--", "true"], "does not exist; create it first"),
        (["--log", ".", "--", "true"], "is a directory"),
        (["--agent", "tests.test_client:add", "--log", "x.log"], "--log or --keep-output"),
        (["--workflow", "tests.test_client:add", "--keep-output"], "--log or --keep-output"),
    ],
)
def test_submit_refuses_a_bad_log_in_one_line(  # noqa: PLR0917 - fixtures and parameters
    run: Run,
    client: wu.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(run("submit", *args), Exit.USAGE, needle)
    assert client.list() == []
    assert not (tmp_path / "x.log").exists()


def test_show_and_tail_of_a_shell_with_a_log(run: Run, state_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    with wu.Supervisor(state_dir, install_signal_handlers=False) as sup:
        theirs = sup.shell("seq 1 30000", log=log).id
        ours = sup.shell("seq 1 30000", keep_output=True).id
        for work_id in (theirs, ours):
            sup.wait(work_id, 30)
    whole = b"".join(b"%d\n" % i for i in range(1, 30001))
    assert str(log) in run("show", theirs, columns=400).stdout
    assert json.loads(run("show", "--json", theirs).stdout)["log"] == str(log)
    shown = json.loads(run("show", "--json", ours).stdout)["log"]
    assert Path(shown).read_bytes() == whole
    # An ended shell's tail comes whole from its log, not from the stored 64 KiB.
    assert run("tail", theirs).stdout_bytes == whole
    assert run("tail", ours).stdout_bytes == whole
