"""Notices across supervisor restarts, and an outbox that stays as small as what is unread."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import workunits as wu
from tests.cli.live import REPO, cli_env
from tests.conftest import GRACE
from workunits import Notification, Supervisor
from workunits.supervisor.actor.supervisor_actor import OUTBOX_TRIM_EVERY
from workunits.testing import ManualClock, ScriptedDriver

# A supervisor process that runs two units to their end, takes one notice with
# get (acknowledged) and claims the other without acknowledging, then waits to
# be SIGKILLed.
TAKER = """
import sys, time, workunits as wu
sup = wu.Supervisor(sys.argv[1])
first, second = sup.shell("echo one"), sup.shell("echo two")
sup.wait(first.id, timeout=30); sup.wait(second.id, timeout=30)
mailbox = sup.notifications()
got = mailbox.get(timeout=30)
held = mailbox.claim(timeout=30)
print(got.id, held.notice.id, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(120)
def test_an_unacknowledged_notice_comes_back_after_a_restart_an_acknowledged_one_never(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-c", TAKER, str(state)],
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        acked, claimed = proc.stdout.readline().split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
    with Supervisor(state, install_signal_handlers=False) as sup:
        again = sup.notifications().get(timeout=10)
        assert isinstance(again, Notification)
        assert (again.id, again.redelivered) == (claimed, True)
        with pytest.raises(wu.NoNotification):
            sup.notifications().get(timeout=0.2)  # `acked` is never delivered again
    with wu.connect(state) as client, pytest.raises(wu.NoNotification):
        client.notifications().get(timeout=0.2)
    assert acked != claimed


def test_the_outbox_keeps_only_what_is_unread(tmp_path: Path) -> None:
    clock = ManualClock()
    with Supervisor(
        tmp_path / "state",
        clock=clock,
        tick_interval=None,
        eviction_grace=GRACE,
        install_signal_handlers=False,
    ) as sup:
        drive = ScriptedDriver(sup)
        mailbox = sup.notifications()
        with wu.connect(sup.state_dir) as client:
            for round_ in range(3):
                for _ in range(20):
                    drive.exit(drive.start().id, 0)
                unread = drive.start()
                drive.exit(unread.id, 0)
                taken = {mailbox.get(timeout=5).id for _ in range(20)}
                assert unread.id not in taken or len(taken) == 20
                clock.advance(OUTBOX_TRIM_EVERY + 1)
                sup.tick()
                # What was acknowledged is gone; what is not read stays, however old.
                assert client.ledger.outbox.size() == round_ + 1
                assert client.ledger.outbox.row_count() == round_ + 1


@pytest.mark.timeout(120)
def test_an_agent_that_takes_its_childrens_notices_acknowledges_them(sup: Supervisor) -> None:
    handle = sup.agent(_parent_taking_children, 4)
    assert handle.result(timeout=60) == 4
    with wu.connect(sup.state_dir) as client:
        children = [r.id for r in client.list(parent=handle.id)]
        assert len(children) == 4
        assert client.ledger.outbox.acknowledged_among(children) == set(children)
        assert client.ledger.outbox.size() == 1  # the parent's own, for the application


def _parent_taking_children(n: int) -> int:
    ctx = wu.current()
    for i in range(n):
        ctx.shell(f"echo child {i}")
    box = ctx.notifications()
    taken = [box.get(timeout=30) for _ in range(n)]
    return len(taken)
