"""``ls`` and ``show``: tables and trees for people, JSON lines for scripts."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import workunits as wu
from tests.cli.conftest import Run
from tests.client_support import FakeSupervisor
from workunits._cli import Exit
from workunits._core.status import Reason, Status
from workunits._ledger import NewUnit


def _child(client: wu.Client, parent: str, description: str) -> str:
    """A child unit, as a supervisor inserts it for a unit that spawned one."""
    work_id = wu.mint_id("b")
    spec = client.ledger.units.encode_spec({"argv": ["true"]}, work_id)
    new = NewUnit(work_id, "shell", spec, 1.0, parent=parent, description=description)
    client.ledger.units.submit(new)
    return work_id


def test_ls_shows_active_units_and_all_of_them_with_all(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    fake.open_session()
    done = client.shell("echo done").id
    busy = client.shell("make", description="compile everything").id
    waiting = client.agent("tests.test_client:add", 1, 2).id
    fake.start(done)
    fake.complete(done)
    fake.start(busy, progress=0.4, message="group 3/8")
    out = run("ls", columns=120).stdout
    assert done not in out
    header, *lines = out.strip().splitlines()
    assert header.split() == ["ID", "KIND", "STATUS", "AGE", "PROGRESS", "DESCRIPTION"]
    assert [line.split()[0] for line in lines] == [busy, waiting]
    assert "running" in lines[0]
    assert "group 3/8" in lines[0]
    assert "compile everything" in lines[0]
    assert "━━━─────  40%" in lines[0]  # 8 characters: 3 of them done
    narrow = run("ls").stdout.splitlines()
    assert all(len(line) <= 80 for line in narrow)
    assert narrow[1].split()[:4] == [busy, "shell", "running", "0s"]
    every = run("ls", "--all").stdout
    assert done in every
    assert "completed" in every


def test_ls_filters_and_json(run: Run, client: wu.Client, fake: FakeSupervisor) -> None:
    shell = client.shell("true").id
    agent = client.agent("tests.test_client:add", 1, 2).id
    fake.start(shell)
    fake.end(shell, Status.FAILED, exit_code=2)
    docs = [json.loads(line) for line in run("ls", "--all", "--json").stdout.splitlines()]
    assert [d["id"] for d in docs] == [shell, agent]
    assert docs[0]["status"] == "failed"
    assert docs[0]["exit_code"] == 2
    assert [json.loads(x)["id"] for x in run("ls", "--json", "--kind", "agent").stdout.split()] == [
        agent
    ]
    assert run("ls", "--status", "failed").stdout.count(shell) == 1
    assert run("ls", "--parent", shell).stdout.strip() == "no units (--all shows ended ones)"


def test_ls_lists_the_other_units_and_names_a_row_it_cannot_read_on_stderr(
    run: Run, client: wu.Client
) -> None:
    bad = client.shell("true").id
    good = client.shell("make").id
    db = sqlite3.connect(client.state_dir / "ledger.db")
    with db:
        db.execute("UPDATE units SET status = 'bogus' WHERE id = ?", (bad,))
    db.close()
    for argv in (("ls", "--all"), ("ls", "--json")):
        result = run(*argv, columns=120)
        assert result.exit_code == Exit.OK, result.output
        assert good in result.stdout
        assert bad not in result.stdout
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"workunits: left out of the list: unit {bad}: column status")
        assert line.endswith("or delete that unit's row"), line


def test_ls_says_so_when_there_is_nothing(run: Run, client: wu.Client) -> None:
    result = run("ls", "--all")
    assert (result.exit_code, result.stdout.strip()) == (Exit.OK, "no units")


def test_show_tells_how_a_unit_ended_with_its_error_and_output(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make", key="nightly").id
    fake.start(work_id, progress=0.5, message="half way")
    fake.output(work_id, b"compiling\nlinking\n")
    fake.ledger.attempts.save_checkpoint(work_id, 1, {"group": 3})
    traceback = "Traceback (most recent call last):\n  ...\nValueError: bad input"
    fake.end(work_id, Status.FAILED, exit_code=1, error=traceback)
    out = run("show", work_id).stdout
    for needle in (
        work_id,
        "failed",
        "nightly",
        "exit code 1",
        "ValueError: bad input",
        "Traceback",
        "half way",
        '{"group":3}',
        "1 of 1",
        "linking",
    ):
        assert needle in out, needle


def test_show_draws_the_tree_of_children(run: Run, client: wu.Client) -> None:
    parent = client.shell("make").id
    child = _child(client, parent, "compile")
    grandchild = _child(client, child, "link")
    out = run("show", parent).stdout
    assert "children" in out
    assert f"{child} shell pending (no supervisor)  compile" in out
    assert f"{grandchild} shell pending (no supervisor)  link" in out
    assert json.loads(run("show", "--json", parent).stdout)["children"] == [child]


def test_show_json_has_every_field_and_a_json_result(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id)
    fake.complete(work_id, {"sum": 3})
    doc = json.loads(run("show", "--json", work_id).stdout)
    assert doc["status"] == "completed"
    assert doc["result"] == {"sum": 3}
    assert doc["result_format"] == "json"
    assert doc["attempt"] == 1
    assert doc["max_attempts"] == 3


def test_show_of_an_expired_unit_says_it_expired(run: Run, client: wu.Client) -> None:
    fake = FakeSupervisor(client.state_dir, expire_after=0.0)
    try:
        work_id = client.shell("true").id
        fake.start(work_id)
        record = fake.row(work_id).to_record()
        fake.ledger.attempts.write(
            dataclasses.replace(record, status=Status.KILLED, reason=Reason.CANCELLED),
            attempt=1,
        )
        fake.ledger.retention.expire()
    finally:
        fake.close()
    out = run("show", work_id).stdout
    assert "expired" in out
    assert "reason cancelled" in out
    doc = json.loads(run("show", "--json", work_id).stdout)
    assert (doc["status"], doc["ended_as"]) == ("expired", "killed")


def test_show_renders_an_agents_transcript_tail_as_tail_does(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id, progress=0.4, message="group 3/8")
    events = [
        {"seq": 1, "ts": 0.0, "type": "stdout", "data": "loading the data\n"},
        {"seq": 2, "ts": 0.0, "type": "event", "data": {"rows": 12}},
        {"seq": 3, "ts": 0.0, "type": "stderr", "data": "a warning\n"},
    ]
    fake.output(work_id, b"".join(json.dumps(e).encode() + b"\n" for e in events))
    fake.complete(work_id, 3)
    out = run("show", work_id).stdout
    for needle in ("loading the data", '[event] {"rows":12}', "[stderr] a warning"):
        assert needle in out, needle
    assert '"type"' not in out  # no raw JSONL
    # Ended: its last progress shows no bar and no percentage, only the message.
    assert "group 3/8" in out
    assert "━" not in out
    assert "40%" not in out
