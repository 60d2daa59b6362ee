"""Notices are claimed, then acknowledged: one consumer at a time, in any process (DESIGN §2.11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import workunits as wu
from tests.ledger.support import new_unit, start
from workunits._ledger import Ledger
from workunits.testing import ManualClock, ScriptedDriver


def _ended_roots(state_dir: Path, n: int) -> list[str]:
    with Ledger(state_dir) as ledger:
        ids = []
        for _ in range(n):
            unit = start(ledger, new_unit(ledger).id)
            ledger.attempts.write(unit.id, attempt=1, status="completed")
            ids.append(unit.id)
    return ids


def test_a_notice_taken_in_a_block_that_raises_comes_back_redelivered(tmp_path: Path) -> None:
    (work_id,) = _ended_roots(tmp_path, 1)
    with wu.connect(tmp_path) as client:
        notices = client.notifications()
        seen = []

        def act_and_crash() -> None:
            with notices.take(5) as notice:
                seen.append(notice)
                raise RuntimeError("crashed while acting")

        with pytest.raises(RuntimeError, match="crashed while acting"):
            act_and_crash()
        assert [(n.id, n.redelivered) for n in seen] == [(work_id, False)]
        with notices.take(5) as again:
            assert again.id == work_id
            assert again.redelivered
        with pytest.raises(TimeoutError):
            notices.get(timeout=0.05)  # acknowledged: never again


def test_an_acknowledged_notice_is_never_delivered_again_in_any_process(tmp_path: Path) -> None:
    first, second = _ended_roots(tmp_path, 2)
    with wu.connect(tmp_path) as client:
        assert client.notifications().get(timeout=5).id == first
    code = (
        "import sys, workunits as wu\n"
        "with wu.connect(sys.argv[1]) as c:\n"
        "    print(c.notifications().get(timeout=5).id)\n"
        "    try:\n"
        "        c.notifications().get(timeout=0.05)\n"
        "    except TimeoutError:\n"
        "        print('none')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == [second, "none"]


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_claim_held_by_a_killed_consumer_is_released_and_redelivered(
    tmp_path: Path, reaped: bool
) -> None:
    """Also while the killed consumer is a zombie its parent has not reaped yet."""
    (work_id,) = _ended_roots(tmp_path, 1)
    code = (
        "import sys, time, workunits as wu\n"
        "c = wu.connect(sys.argv[1])\n"
        "claim = c.notifications().claim(timeout=5)\n"
        "print(claim.notice.id, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == work_id
        with wu.connect(tmp_path) as client:
            with pytest.raises(TimeoutError):
                client.notifications().get(timeout=0.05)  # held by a live consumer
            os.kill(proc.pid, signal.SIGKILL)
            if reaped:
                proc.wait(timeout=10)
            else:  # wait for its exit, but leave it unreaped: a zombie
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            claim = client.notifications().claim(timeout=5)
            assert claim.notice.id == work_id
            assert claim.notice.redelivered
            assert claim.ack()
            assert not claim.ack()
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_claim_acknowledged_later_from_the_claim_object(tmp_path: Path) -> None:
    a, b = _ended_roots(tmp_path, 2)
    with wu.connect(tmp_path) as client:
        notices = client.notifications()
        held = notices.claim(timeout=5)
        assert held.notice.id == a
        assert notices.get(timeout=5).id == b  # the next consumer gets the next notice
        assert held.release()
        assert not held.ack()  # settled by the release
        assert notices.get(timeout=5).id == a


def test_the_supervisor_hands_back_a_dead_consumers_claims_without_a_new_claim(
    msup: wu.Supervisor, drive: ScriptedDriver, clock: ManualClock
) -> None:
    # A remote consumer claims an application notice, then stops renewing. Nobody
    # claims again, yet the notice must count as waiting once the lease lapses:
    # the supervisor's periodic duties release it.
    unit = drive.start()
    drive.exit(unit.id, 0)
    with Ledger.open_existing(msup.state_dir, clock=clock) as ledger:
        held = ledger.outbox.claim(None, owner="lease:http-client", lease=5)
    assert held is not None
    assert held.notice.id == unit.id
    notices = msup.notifications()
    assert len(notices) == 0
    clock.advance(5)
    msup.tick()
    assert len(notices) == 1
