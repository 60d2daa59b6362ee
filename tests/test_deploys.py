"""Deploys are not failures: a hand-over raises the attempt, counts against nothing, says so.

A unit waiting days for an approval outlives any number of deploys
(invariant 13); its attempt list, its transcript and ``show`` say
``handed-over`` (never killed or shutdown); and ``close(deploy=True)`` returns
as soon as its units have stopped, the grace being only an upper bound.
Embedded users get ``serve``'s behaviour with ``aclose(deploy=True)``,
``Supervisor(on_sigterm="deploy")`` and ``on_exit="deploy"``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import workunits as wu
from tests import deploy_jobs
from tests.conftest import eventually
from workunits import Reason, Status
from workunits._cli import cli
from workunits._ledger import UnitRow
from workunits.testing import ManualClock

pytestmark = pytest.mark.timeout(180)

GRACE = 60.0  # far longer than any stop here takes: a close that waits it fails the test


def _supervisor(state: Path, **options: object) -> wu.Supervisor:
    return wu.Supervisor(
        state,
        install_signal_handlers=False,
        shutdown_grace=GRACE,
        **options,  # type: ignore[arg-type]
    )


def _waiting(sup: wu.Supervisor, work_id: str) -> None:
    """Until the unit's current attempt has checkpointed and waits for its approval."""
    state = sup.state_dir

    def waiting() -> bool:
        record = sup.get(work_id)
        if record.status is not Status.RUNNING:
            return False
        with wu.connect(state) as client:
            saved = client.row(work_id).checkpoint
        return saved is not None and record.attempt in orjson.loads(saved)["attempts"]

    eventually(waiting, what="the unit's attempt to checkpoint", timeout=60)
    eventually(
        lambda: sup.get(work_id).progress_message == "waiting for approval",
        what="the unit waiting for its approval",
        timeout=60,
    )


def _events(path: str) -> list[dict[str, object]]:
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f if line.strip()]


def test_a_unit_waiting_for_approval_outlives_more_deploys_than_its_attempts(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    deploys = 4  # more than the default max_attempts (3)
    with _supervisor(state) as first:
        handle = first.agent(deploy_jobs.await_approval)
        _waiting(first, handle.id)
        first.close(deploy=True)
    for _ in range(deploys - 1):
        with _supervisor(state) as sup:
            _waiting(sup, handle.id)
            sup.close(deploy=True)
    with _supervisor(state) as last:
        _waiting(last, handle.id)
        last.signal(handle.id, "approval", "yes")
        record = last.wait(handle.id, timeout=60)
        result = last.result(handle.id)
    assert record.status is Status.COMPLETED, record.describe_end()
    assert record.attempt == deploys + 1
    assert result == {"approved": "yes", "attempts": list(range(1, deploys + 2))}
    assert [(a.attempt, a.reason) for a in record.attempts] == [
        (n, Reason.HANDED_OVER) for n in range(1, deploys + 1)
    ]
    transcript = _events(str(state / "transcripts" / f"{handle.id}.jsonl"))
    kinds = [e["type"] for e in transcript]
    assert kinds.count("handed-over") == deploys
    # Each stopped where it was asked to (at its wait), not by SIGKILL, and said no more.
    assert [e["signal"] for e in transcript if e["type"] == "handed-over"] == [None] * deploys
    assert "cancelled" not in kinds
    assert "error" not in kinds
    ends = [e for e in transcript if e["type"] == "end"]
    assert [(e["status"], e["reason"]) for e in ends] == [("completed", None)]
    shown = CliRunner().invoke(
        cli, ["show", handle.id, "--state", str(state)], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert f"{deploys + 1}: 1 of 3 counted, {deploys} handed over at deploys" in shown.output
    assert shown.output.count("reason handed-over") == deploys
    assert "killed" not in shown.output
    assert "shutdown" not in shown.output


def test_a_retry_after_deploys_counts_and_backs_off_from_its_failures_alone(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    clock = ManualClock()
    policy = wu.Retry(max_attempts=3, initial=4.0, backoff=2.0, jitter=False)
    deploys = 2
    with _supervisor(state, clock=clock) as first:
        handle = first.agent(deploy_jobs.fail_once_after_deploys, deploys, retry=policy)
        _waiting(first, handle.id)
        first.close(deploy=True)
    with _supervisor(state, clock=clock) as second:
        _waiting(second, handle.id)
        second.close(deploy=True)
    with _supervisor(state, clock=clock) as last:

        def backing_off() -> wu.WorkRecord | None:
            record = last.get(handle.id)
            return record if record.retry_at is not None else None

        failed = eventually(backing_off, what="the first failure's backoff", timeout=60)
        # The first failure: the second counted attempt is next, after `initial`.
        assert failed.attempt == deploys + 1
        assert failed.progress_message == "retry 2/3 in 4.0 s"
        assert failed.retry_at == pytest.approx(clock.now() + 4.0)
        clock.advance(4.0)
        last.tick()
        record = last.wait(handle.id, timeout=60)
        result = last.result(handle.id)
    assert record.status is Status.COMPLETED, record.describe_end()
    assert result == deploys + 2
    assert [(a.attempt, a.reason) for a in record.attempts] == [
        (1, Reason.HANDED_OVER),
        (2, Reason.HANDED_OVER),
        (3, None),
    ]


def test_close_for_a_deploy_returns_once_its_units_have_stopped_not_after_the_grace(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    stop = tmp_path / "stop"
    sup = _supervisor(state)
    try:
        handle = sup.agent(deploy_jobs.count_with_checkpoints, str(stop))
        eventually(lambda: sup.get(handle.id).status is Status.RUNNING, what="running")
        with wu.connect(state) as client:
            eventually(lambda: client.row(handle.id).checkpoint is not None, what="a checkpoint")
    finally:
        started = time.monotonic()
        sup.close(deploy=True)
        took = time.monotonic() - started
    assert took < GRACE / 4, f"close(deploy=True) took {took:.1f} s: it waited out the grace"
    with wu.connect(state) as client:
        row = client.row(handle.id)
        assert row.status is Status.RUNNING  # handed over, not ended
        saved = orjson.loads(row.checkpoint or b"null")["n"]
        assert [(a.attempt, a.reason) for a in row.attempts] == [(1, Reason.HANDED_OVER)]
    stop.touch()
    with _supervisor(state) as second:
        record = second.wait(handle.id, timeout=60)
        assert record.status is Status.COMPLETED
        assert second.result(handle.id) >= saved  # resumed from its last checkpoint


def test_aclose_with_deploy_hands_the_units_over(tmp_path: Path) -> None:
    state = tmp_path / "state"

    async def run() -> str:
        sup = _supervisor(state)
        async with sup:
            handle = await sup.agent_async(deploy_jobs.await_approval)
            await asyncio.to_thread(_waiting, sup, handle.id)
            await sup.aclose(deploy=True)
        return handle.id

    work_id = asyncio.run(run())
    with wu.connect(state) as client:
        row = client.row(work_id)
    assert row.status is Status.RUNNING
    assert [a.reason for a in row.attempts] == [Reason.HANDED_OVER]


def test_on_exit_deploy_makes_leaving_the_block_a_deploy(tmp_path: Path) -> None:
    state = tmp_path / "state"

    async def run() -> str:
        async with _supervisor(state, on_exit="deploy") as sup:
            handle = await sup.agent_async(deploy_jobs.await_approval)
            await asyncio.to_thread(_waiting, sup, handle.id)
        return handle.id

    work_id = asyncio.run(run())
    with wu.connect(state) as client:
        assert client.row(work_id).status is Status.RUNNING
    with _supervisor(state, on_exit="deploy") as sup:
        _waiting(sup, work_id)
    with wu.connect(state) as client:
        row = client.row(work_id)
    assert row.status is Status.RUNNING
    assert [a.reason for a in row.attempts] == [Reason.HANDED_OVER] * 2


@pytest.mark.parametrize("option", ["on_sigterm", "on_exit"])
def test_a_close_mode_that_is_not_one_is_refused(tmp_path: Path, option: str) -> None:
    with pytest.raises(wu.SpecError, match=f"{option} must be one of"):
        wu.Supervisor(tmp_path / "state", **{option: "later"})  # type: ignore[arg-type]
    assert not (tmp_path / "state").exists()


SCRIPT = """
import sys, time
import workunits as wu
from tests import deploy_jobs

sup = wu.Supervisor(sys.argv[1], on_sigterm=sys.argv[2], shutdown_grace=60)
handle = sup.agent(deploy_jobs.await_approval)
print(handle.id, flush=True)
while True:
    time.sleep(1)  # the program's own work; SIGTERM ends it
"""


@pytest.mark.parametrize(("mode", "status"), [("deploy", "running"), ("shutdown", "killed")])
def test_sigterm_to_an_embedded_supervisor_is_a_deploy_when_asked(
    tmp_path: Path, mode: str, status: str
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(state), mode],
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    ) as proc:
        row = _sigterm_when_waiting(proc, state)
    assert row.status.value == status
    if mode == "deploy":
        assert [a.reason for a in row.attempts] == [Reason.HANDED_OVER]
    else:
        assert row.reason is Reason.SHUTDOWN


def _sigterm_when_waiting(proc: subprocess.Popen[bytes], state: Path) -> UnitRow:
    try:
        assert proc.stdout is not None
        work_id = proc.stdout.readline().decode().strip()
        with wu.connect(state) as client:
            eventually(
                lambda: client.row(work_id).progress_message == "waiting for approval",
                what="the unit waiting",
                timeout=60,
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == -signal.SIGTERM
            row = client.row(work_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return row
