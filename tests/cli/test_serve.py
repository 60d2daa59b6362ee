"""``workunits serve`` end to end: units submitted from the command line run, end, and report.

Every command here is the CLI in-process (CliRunner) or a client, talking to a
live ``workunits serve`` subprocess through the ledger only.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import workunits as wu
from tests.cli.conftest import Run
from tests.cli.live import WAIT, Serve, release
from tests.conftest import eventually
from workunits._cli import Exit
from workunits._core.status import Reason, Status

pytestmark = pytest.mark.slow


def test_a_submitted_command_runs_and_its_result_is_its_output(served: Serve, run: Run) -> None:
    assert "supervising" in served.banner
    work_id = run("submit", "-q", "--", "echo hello").stdout.strip()
    assert run("wait", "--timeout", f"{WAIT}s", work_id).exit_code == Exit.OK
    assert run("result", work_id).stdout == "hello\n"
    failing = run("submit", "-q", "--", "exit 3").stdout.strip()
    result = run("wait", "--timeout", f"{WAIT}s", failing)
    assert (result.exit_code, result.stdout.strip()) == (
        Exit.FAILED,
        f"{failing} failed (exit code 3)",
    )


def test_an_agent_by_reference_returns_its_value(served: Serve, run: Run) -> None:
    work_id = run(
        "submit", "-q", "--agent", "tests.test_client:add", "--args", "[1]", "--kwargs", '{"b": 2}'
    ).stdout.strip()
    result = run("result", "--timeout", f"{WAIT}s", work_id)
    assert (result.exit_code, result.stdout.strip()) == (Exit.OK, "3")


def test_cancel_from_the_command_line_ends_a_running_unit(
    served: Serve, run: Run, client: wu.Client
) -> None:
    work_id = client.shell("exec sleep 600").id
    eventually(lambda: client.get(work_id).status is Status.RUNNING, timeout=WAIT)
    said = run("cancel", "--grace", "1", work_id)
    assert said.exit_code == Exit.OK
    assert work_id in said.stdout
    assert run("wait", "--timeout", f"{WAIT}s", work_id).exit_code == Exit.KILLED
    assert client.get(work_id).reason is Reason.CANCELLED
    again = run("kill", work_id)
    assert "already ended" in again.stdout


def test_a_cancel_queued_before_serve_starts_ends_the_unit_without_running_it(
    run: Run, client: wu.Client, start_serve: Callable[[], Serve]
) -> None:
    work_id = client.shell("echo must not run").id
    assert "queued" in run("cancel", work_id).stdout
    start_serve()
    record = client.wait(work_id, WAIT)
    assert (record.status, record.reason, record.started_at) == (
        Status.KILLED,
        Reason.CANCELLED,
        None,
    )


def test_root_notices_reach_a_client_once(served: Serve, client: wu.Client) -> None:
    work_id = client.shell("true").id
    notice = client.notifications().get(timeout=WAIT)
    assert (notice.id, notice.status) == (work_id, Status.COMPLETED)
    assert client.notifications().get_nowait() is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_serve_stops_cleanly_on_a_stop_signal(
    client: wu.Client, start_serve: Callable[[], Serve], signum: int
) -> None:
    serve = start_serve()
    assert "supervising" in serve.banner
    assert serve.stop(signum) == 0


def test_a_second_serve_on_the_same_state_dir_refuses_in_one_line(served: Serve, run: Run) -> None:
    result = run("serve")
    assert result.exit_code == Exit.BUSY
    (line,) = result.stderr.splitlines()
    assert line.startswith("workunits: ")
    assert "supervisor" in line


def test_serve_refuses_a_bad_concurrency_limit(run: Run, client: wu.Client) -> None:
    result = run("serve", "--concurrency", "agent=0")
    assert result.exit_code == Exit.USAGE
    assert result.stderr.strip() == (
        "workunits: --concurrency takes KIND=N with N >= 1, got 'agent=0'"
    )


def test_serve_refuses_a_retention_that_is_no_duration(run: Run, client: wu.Client) -> None:
    result = run("serve", "--expire-after", "soon")
    assert result.exit_code == Exit.USAGE
    assert "soon" in result.stderr


def test_serve_refuses_a_cap_on_no_kind(run: Run, client: wu.Client) -> None:
    result = run("serve", "--concurrency", "shells=1")
    assert result.exit_code == Exit.USAGE
    assert "concurrency names no kind of this supervisor: 'shells'" in result.stderr


def test_serve_takes_a_kind_by_its_letter_in_place_of_the_default(client: wu.Client) -> None:
    serve = Serve(client.state_dir, "--concurrency", "a=1")
    try:
        assert "at most agent 1 at once" in serve.banner  # not refused as agent capped twice
    finally:
        assert serve.stop() == 0


def test_serve_with_an_unsynced_ledger_says_so_and_runs_units(client: wu.Client, run: Run) -> None:
    serve = Serve(client.state_dir, "--ledger-sync", "normal")
    try:
        assert "ledger not fsynced" in serve.banner
        work_id = run("submit", "-q", "--", "echo unsynced").stdout.strip()
        assert run("wait", "--timeout", f"{WAIT}s", work_id).exit_code == Exit.OK
        assert run("result", work_id).stdout == "unsynced\n"
    finally:
        assert serve.stop() == 0


def test_serve_refuses_an_unknown_ledger_sync(run: Run, client: wu.Client) -> None:
    result = run("serve", "--ledger-sync", "off")
    assert result.exit_code == Exit.USAGE
    assert "'off' is not one of 'full', 'normal'" in result.stderr


def test_drain_timeout_lets_a_unit_that_cannot_resume_finish_and_starts_nothing_new(
    client: wu.Client, tmp_path: Path
) -> None:
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    serve = Serve(client.state_dir, "--drain-timeout", "60", "--concurrency", "shell=1")
    try:
        finishing = client.shell(f"read word < {fifo}; echo $word").id
        eventually(lambda: client.get(finishing).status is Status.RUNNING, timeout=WAIT)
        waiting = client.shell("echo must wait for the next serve").id  # no slot: pending
        serve.proc.send_signal(signal.SIGTERM)
        assert "draining for up to 60 s" in serve.read_line()
        release(fifo, "finished")  # a deploy without the drain would have killed it
        assert serve.proc.wait(WAIT) == 0  # once it has finished (a signal would cut it short)
    finally:
        serve.stop(signal.SIGKILL)
    done = client.get(finishing)
    assert (done.status, client.result(finishing)) == (Status.COMPLETED, done)
    assert (client.get(waiting).status, client.get(waiting).started_at) == (Status.PENDING, None)


def test_a_second_signal_cuts_the_drain_short(client: wu.Client) -> None:
    serve = Serve(client.state_dir, "--drain-timeout", "600")
    try:
        stuck = client.shell("exec sleep 600").id
        eventually(lambda: client.get(stuck).status is Status.RUNNING, timeout=WAIT)
        serve.proc.send_signal(signal.SIGTERM)
        assert "draining" in serve.read_line()
        assert serve.stop(signal.SIGTERM) == 0  # within WAIT, not 600 s
    finally:
        serve.stop(signal.SIGKILL)
    ended = client.get(stuck)
    assert (ended.status, ended.reason) == (Status.KILLED, Reason.SHUTDOWN)
