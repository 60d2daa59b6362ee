"""Requests first: a cancel or kill sent while no supervisor runs wins over resuming.

DESIGN §4: the next supervisor applies queued requests before it resumes or
starts anything. A resumable agent runs; its supervisor is SIGKILLed (the
zygote kills the agent); a client cancels (or kills) it; the next supervisor
ends it ``killed`` without a second attempt: its body, which appends a line
per run, ran once. A tick does the same: a cancel sent while ends wait to be
written is applied before the queued start those ends make room for.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.conftest import alive, eventually
from tests.faults.diskfull import PageLimitFull, ledger_of
from workunits import Reason, Status

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """tests/faults/down_host.py on ``tmp_path/state``; killed for sure at teardown."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.faults.down_host",
            str(tmp_path / "state"),
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def _runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", ["cancel", "kill"])
def test_a_request_sent_while_no_supervisor_runs_is_applied_before_resuming(
    tmp_path: Path, host: subprocess.Popen[str], verb: str
) -> None:
    state, runs = tmp_path / "state", tmp_path / "runs"
    assert host.stdout is not None
    work_id = json.loads(host.stdout.readline())["id"]
    with wu.connect(state) as client:
        eventually(lambda: _runs(runs) == ["1"], what="the first attempt's body to run")
        pid = eventually(lambda: client.get(work_id).pid, what="its pid to be recorded")
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
        eventually(lambda: not alive(pid), what="the dead session's unit process to die")
        assert client.get(work_id).status == Status.RUNNING  # resumable, and nobody ended it
        assert getattr(client, verb)(work_id) is True

        with wu.Supervisor(state, install_signal_handlers=False) as sup:
            assert sup.recovered["resumed"] == []
            record = sup.wait(work_id, timeout=10)
            reason = Reason.CANCELLED if verb == "cancel" else Reason.KILLED
            assert (record.status, record.reason, record.attempt) == (Status.KILLED, reason, 1)
        inbox = client.notifications()
        notices = []
        while (notice := inbox.get_nowait()) is not None:
            notices.append(notice.id)
        assert notices == [work_id]
    assert _runs(runs) == ["1"]  # no second attempt ever ran its body


@pytest.mark.timeout(60)
def test_a_tick_applies_a_cancel_before_the_queued_start_a_landing_end_allows(
    tmp_path: Path,
) -> None:
    state, runs, go = tmp_path / "state", tmp_path / "runs", tmp_path / "go"
    filler = PageLimitFull()  # only the supervisor's connection is limited: clients write

    def unit(sup: wu.Supervisor) -> str:
        script = (
            f"head -c {filler.output_bytes} /dev/zero | tr '\\0' x; "
            f"echo ran >> {shlex.quote(str(runs))}; "
            f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.02; done"
        )
        return sup.shell(script).id

    with (
        wu.Supervisor(
            state, install_signal_handlers=False, concurrency={"shell": 1}, tick_interval=None
        ) as sup,
        wu.connect(state) as client,
    ):
        first = unit(sup)
        queued = unit(sup)
        eventually(lambda: _runs(runs) == ["ran"], what="the first unit to run")
        filler.fill(ledger_of(sup))
        go.touch()
        eventually(lambda: sup.get(first).status == Status.COMPLETED, what="its end in memory")
        assert sup.get(first).durable is False
        assert client.cancel(queued) is True
        filler.free(ledger_of(sup))
        sup.tick()  # takes the cancel and retries the end that frees the slot: in that order
        record = sup.wait(queued, timeout=30)
        assert (record.status, record.reason) == (Status.KILLED, Reason.CANCELLED)
        assert record.started_at is None  # ended pending: never started
        assert sup.wait(first, timeout=30).status == Status.COMPLETED
    assert _runs(runs) == ["ran"]  # the queued unit never started
