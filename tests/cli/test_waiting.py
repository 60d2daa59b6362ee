"""``wait`` and ``result``: the exit code says how the unit ended."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import workunits as wu
from tests.cli.conftest import Run, one_line_error
from tests.client_support import FakeSupervisor
from workunits._cli import Exit
from workunits._core.status import Reason, Status


def _ended(client: wu.Client, fake: FakeSupervisor, status: Status, **fields: object) -> str:
    work_id = client.shell("make").id
    fake.start(work_id)
    fake.output(work_id, b"all done\n")
    fake.end(work_id, status, **fields)
    return work_id


@pytest.mark.parametrize(
    "case",
    [
        (Status.COMPLETED, {"exit_code": 0}, Exit.OK, "completed (exit code 0)"),
        (Status.FAILED, {"exit_code": 2}, Exit.FAILED, "failed (exit code 2)"),
        (Status.KILLED, {"reason": Reason.CANCELLED}, Exit.KILLED, "killed (reason cancelled)"),
    ],
)
def test_wait_exits_with_the_status_code(
    run: Run,
    client: wu.Client,
    fake: FakeSupervisor,
    case: tuple[Status, dict[str, Any], Exit, str],
) -> None:
    status, fields, code, said = case
    work_id = _ended(client, fake, status, **fields)
    result = run("wait", work_id)
    assert (result.exit_code, result.stdout.strip()) == (code, f"{work_id} {said}")
    doc = json.loads(run("wait", "--json", work_id).stdout)
    assert (doc["id"], doc["status"]) == (work_id, status.value)


def test_wait_exits_4_while_the_unit_still_runs(run: Run, client: wu.Client) -> None:
    work_id = client.shell("make").id
    one_line_error(run("wait", "--timeout", "50ms", work_id), Exit.RUNNING, "still pending")
    result = run("wait", "--json", "--timeout", "0", work_id)
    assert result.exit_code == Exit.RUNNING
    assert json.loads(result.stdout)["status"] == "pending"


def test_wait_returns_when_another_process_ends_the_unit(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id

    def end() -> None:
        fake.start(work_id)
        fake.complete(work_id)

    ender = threading.Thread(target=end)
    ender.start()
    try:
        assert run("wait", "--timeout", "10s", work_id).exit_code == Exit.OK
    finally:
        ender.join(10)


def test_wait_and_result_of_an_expired_unit_exit_5(run: Run, client: wu.Client) -> None:
    fake = FakeSupervisor(client.state_dir, expire_after=0.0)
    try:
        work_id = _ended(client, fake, Status.COMPLETED, exit_code=0)
        fake.ledger.retention.expire()
    finally:
        fake.close()
    one_line_error(run("wait", work_id), Exit.UNKNOWN, "has expired")
    one_line_error(run("result", work_id), Exit.UNKNOWN, "has expired")


def test_result_prints_the_value_as_json(run: Run, client: wu.Client, fake: FakeSupervisor) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id)
    fake.complete(work_id, {"sum": 3, "parts": [1, 2]})
    result = run("result", work_id)
    assert result.exit_code == Exit.OK
    assert json.loads(result.stdout) == {"sum": 3, "parts": [1, 2]}
    assert json.loads(run("result", "--json", work_id).stdout) == {
        "id": work_id,
        "result": {"sum": 3, "parts": [1, 2]},
    }


def test_result_prints_a_value_json_cannot_hold_as_its_repr(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id)
    fake.complete(work_id, {1: (2, 3)})
    assert run("result", work_id).stdout.strip() == "{1: (2, 3)}"


def test_the_result_of_a_shell_unit_is_its_output(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = _ended(client, fake, Status.COMPLETED, exit_code=0)
    assert run("result", work_id).stdout == "all done\n"
    assert json.loads(run("result", "--json", work_id).stdout) == {
        "id": work_id,
        "exit_code": 0,
        "output": "all done\n",
    }


def test_result_of_a_failed_or_killed_unit_says_why_in_one_line(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    failed = _ended(
        client,
        fake,
        Status.FAILED,
        error="Traceback (most recent call last):\n  File x\nValueError: bad",
    )
    killed = _ended(client, fake, Status.KILLED, reason=Reason.TIMEOUT)
    one_line_error(run("result", failed), Exit.FAILED, "ValueError: bad")
    one_line_error(run("result", killed), Exit.KILLED, "reason timeout")
    one_line_error(
        run("result", "--timeout", "0", client.shell("true").id), Exit.RUNNING, "still pending"
    )
