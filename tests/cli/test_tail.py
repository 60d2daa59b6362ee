"""``tail``: output from the start; agent transcripts as readable events; -f to the end."""

from __future__ import annotations

import json
import threading

import workunits as wu
from tests.cli.conftest import Run
from tests.client_support import FakeSupervisor
from tests.conftest import eventually
from workunits._cli import Exit
from workunits._core.status import Reason, Status


def test_tail_prints_the_output_so_far_and_returns(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id
    assert run("tail", work_id).stdout == ""  # pending: nothing yet
    fake.start(work_id)
    fake.output(work_id, b"one\ntwo\nno newline")
    result = run("tail", work_id)
    assert (result.exit_code, result.stdout) == (Exit.OK, "one\ntwo\nno newline")
    lines = [json.loads(x) for x in run("tail", "--json", work_id).stdout.splitlines()]
    assert lines == [
        {"type": "output", "line": "one"},
        {"type": "output", "line": "two"},
        {"type": "output", "line": "no newline"},
    ]


def test_tail_of_an_ended_unit_prints_its_tail(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id
    fake.start(work_id)
    fake.output(work_id, b"done\n")
    fake.complete(work_id)
    assert run("tail", work_id).stdout == "done\n"


def test_tail_renders_an_agent_transcript_and_raw_gives_the_jsonl(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id)
    fake.event(work_id, "stdout", data="hello\n")
    fake.event(work_id, "progress", fraction=0.5, message="half")
    out = run("tail", work_id).stdout.splitlines()
    assert out[0].startswith(f"[start] {work_id} attempt 1")
    assert out[1:] == ["hello", "[progress]  50% half"]
    raw = run("tail", "--raw", work_id).stdout.splitlines()
    assert [json.loads(line)["type"] for line in raw] == ["start", "stdout", "progress"]
    events = [json.loads(line) for line in run("tail", "--json", work_id).stdout.splitlines()]
    assert [e["type"] for e in events] == ["start", "stdout", "progress"]


def test_tail_follow_prints_everything_then_the_status_and_exits_with_it(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id
    fake.open_session()
    fake.start(work_id)
    fake.output(work_id, b"first\n")

    held: list[bool] = []

    def finish() -> None:
        # The viewer holds a retain lease while it follows: end the unit under it.
        try:
            eventually(lambda: client.ledger.retains.held([work_id]) == {work_id}, what="a lease")
            held.append(True)
        finally:
            fake.output(work_id, b"second\n")
            fake.end(work_id, Status.KILLED, reason=Reason.CANCELLED)

    ender = threading.Thread(target=finish)
    ender.start()
    try:
        result = run("tail", "-f", work_id)
    finally:
        ender.join(10)
    assert result.exit_code == Exit.KILLED
    assert result.stdout == "first\nsecond\n"
    assert result.stderr == f"-- {work_id} killed (reason cancelled)\n"
    # It retained the unit (a lease) while following and released it on the way out.
    assert held == [True]
    assert client.ledger.retains.held([work_id]) == set()
    assert fake.apply_requests() == []


def test_tail_follow_without_a_supervisor_says_nothing_will_change_until_one_runs(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id  # pending, and no supervisor holds the state dir

    def end_it() -> None:
        try:
            eventually(lambda: client.ledger.retains.held([work_id]) == {work_id}, what="a lease")
        finally:
            fake.start(work_id)
            fake.complete(work_id)

    ender = threading.Thread(target=end_it)
    ender.start()
    try:
        result = run("tail", "-f", work_id)
    finally:
        ender.join(10)
    assert result.exit_code == Exit.OK
    first, *_ = result.stderr.splitlines()
    assert first.startswith(f"workunits: {work_id} is pending")
    assert "nothing will change until a supervisor runs" in first


def test_tail_follow_json_ends_with_the_status_object(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id
    fake.start(work_id)
    fake.output(work_id, b"x\n")
    fake.complete(work_id)
    result = run("tail", "-f", "--json", work_id)
    assert result.exit_code == Exit.OK
    *output, status = (json.loads(line) for line in result.stdout.splitlines())
    assert output == [{"type": "output", "line": "x"}]
    assert (status["type"], status["id"], status["status"]) == ("status", work_id, "completed")
