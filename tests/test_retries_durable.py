"""A retry schedule outlives a SIGKILLed supervisor: the next one continues it.

Real processes: a supervisor (tests/retry_host.py) whose agent failed its first
attempt is SIGKILLed while the unit waits 600 s for its second; a new
supervisor, on a manual clock set to real time, finds the unit still
``running``, waiting, keeps its ID and its attempts, starts attempt 2 when the
schedule says (not before) and sends the one notice at the end.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workunits as wu
from workunits.testing import ManualClock

from .conftest import eventually
from .retry_jobs import fail_until

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_a_sigkilled_supervisor_s_retry_schedule_is_continued(tmp_path: Path) -> None:
    state = tmp_path / "state"
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.retry_host", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        work_id = json.loads(host.stdout.readline())["id"]
        with wu.connect(state) as client:
            waiting = eventually(
                lambda: client.get(work_id) if client.get(work_id).retry_at else None,
                what="the first attempt to fail",
            )
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=10)
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()
    assert (waiting.status, waiting.attempt) == (wu.Status.RUNNING, 1)
    assert waiting.retry_at is not None

    clock = ManualClock(time.time())
    with wu.Supervisor(
        state, clock=clock, tick_interval=None, install_signal_handlers=False
    ) as sup:
        assert work_id in sup.recovered["resumed"]
        record = sup.get(work_id)
        assert (record.status, record.attempt, record.retry_at) == (
            wu.Status.RUNNING,
            1,
            waiting.retry_at,
        )
        assert [a.attempt for a in record.attempts] == [1]
        sup.tick()
        assert sup.get(work_id).attempt == 1  # the schedule holds: not due yet
        clock.set(waiting.retry_at)
        sup.tick()
        assert sup.result(work_id, timeout=30) == 2
        ended = sup.get(work_id)
        assert (ended.attempt, [a.attempt for a in ended.attempts]) == (2, [1])
        # The key still names the unit; its one notice comes now, at its end.
        policy = wu.Retry(max_attempts=3, initial=600.0, jitter=False)
        assert sup.agent(fail_until, 2, retry=policy, key="flaky").id == work_id
        mailbox = sup.notifications()
        assert mailbox.get(timeout=10).id == work_id
        with pytest.raises(wu.NoNotification):
            mailbox.get(timeout=0.1)
