"""``workunits submit``: shell commands and callables become pending rows, printed by ID."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import workunits as wu
from tests.cli.conftest import Run
from tests.client_support import FakeSupervisor
from workunits._cli import Exit


def _spec(client: wu.Client, work_id: str) -> dict[str, Any]:
    spec = client.ledger.load_spec(work_id)
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
