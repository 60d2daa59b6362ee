"""``cancel``, ``kill`` and ``gc``: requests through the ledger, and freeing old rows."""

from __future__ import annotations

import json
import threading

import workunits as wu
from tests.cli.conftest import Run, one_line_error
from tests.client_support import FakeSupervisor
from workunits._cli import Exit
from workunits._core.status import Reason


def test_cancel_without_a_supervisor_is_queued_and_says_so(run: Run, client: wu.Client) -> None:
    work_id = client.shell("make").id
    result = run("cancel", "--grace", "2", work_id)
    assert result.exit_code == Exit.OK
    assert "queued: no supervisor is running" in result.stdout
    (request,) = client.ledger.requests.take(10)
    assert (request.verb, request.target, request.args) == ("cancel", work_id, {"grace": 2.0})


def test_cancel_of_an_ended_unit_is_a_no_op_that_says_so(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.shell("make").id
    fake.start(work_id)
    fake.complete(work_id)
    for verb in ("cancel", "kill"):
        result = run(verb, work_id)
        assert result.exit_code == Exit.OK
        assert result.stdout.strip() == (
            f"{work_id} completed (exit code 0): it had already ended, nothing to {verb}"
        )
    assert json.loads(run("kill", "--json", work_id).stdout) == {
        "id": work_id,
        "verb": "kill",
        "requested": False,
        "status": "completed",
    }
    assert fake.apply_requests() == []


def _serve_requests(fake: FakeSupervisor, stop: threading.Event) -> threading.Thread:
    """A supervisor tick loop: apply requests until ``stop`` (a timed wait, not a sleep)."""

    def loop() -> None:
        while not stop.wait(0.01):
            fake.apply_requests()

    thread = threading.Thread(target=loop)
    thread.start()
    return thread


def test_cancel_and_kill_with_a_supervisor_report_what_happened(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    fake.open_session()
    cancelled = client.shell("make").id
    killed = client.shell("make").id
    fake.start(killed)
    stop = threading.Event()
    ticker = _serve_requests(fake, stop)
    try:
        result = run("cancel", cancelled)
        assert result.stdout.strip() == f"{cancelled} killed (reason cancelled)"
        doc = json.loads(run("kill", "--json", killed).stdout)
    finally:
        stop.set()
        ticker.join(10)
    assert doc == {
        "id": killed,
        "verb": "kill",
        "requested": True,
        "applied": True,
        "status": "killed",
    }
    assert client.get(killed).reason is Reason.KILLED


def test_a_supervisor_that_does_not_answer_in_time_is_reported(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    fake.open_session()  # alive, but this test never applies the request
    work_id = client.shell("make").id
    result = run("kill", "--wait", "20ms", work_id)
    assert result.exit_code == Exit.OK
    assert "has not applied it yet" in result.stdout


def test_gc_expires_old_units_and_says_what_it_freed(
    run: Run, client: wu.Client, fake: FakeSupervisor
) -> None:
    work_id = client.agent("tests.test_client:add", 1, 2).id
    fake.start(work_id)
    fake.complete(work_id, "x" * 5000)
    running = client.shell("make").id
    fake.start(running)
    kept = run("gc")  # the default: older than 7 days
    assert kept.stdout.startswith("expired 0 unit(s), freeing 0 bytes; forgot 0 unit(s)")
    soon = run("gc", "--json", "--older-than", "1h")  # ended just now: kept
    assert json.loads(soon.stdout) == {"expired": 0, "bytes_freed": 0, "forgotten": 0}
    result = run("gc", "--older-than", "0s")
    assert result.exit_code == Exit.OK
    assert result.stdout.strip() == (
        "expired 1 unit(s), freeing 5.1 KiB; forgot 1 unit(s) expired more than 0s ago"
    )
    assert [r.id for r in client.rows()] == [running]
    one_line_error(run("show", work_id), Exit.UNKNOWN, f"no unit {work_id}")
