"""Signals: ``ctx.wait_for(name)`` inside a unit, ``signal(id, name, value)`` from outside.

Real processes and a real ledger: units are agents in their own processes;
signals come from the supervisor, from a client through the ledger, and, in
the durable test, into a ledger no supervisor runs on, between the SIGKILL of
one supervisor process and the start of the next.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import workunits as wu

from .conftest import eventually
from .signal_jobs import approve, collect, wait_briefly

ROOT = Path(__file__).resolve().parent.parent


def test_wait_for_returns_the_value_sent_and_shows_that_it_waits(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state") as sup:
        unit = sup.agent(approve)
        eventually(
            lambda: sup.get(unit.id).progress_message == "waiting for approval",
            what="the unit to show that it waits",
        )
        assert sup.signal(unit.id, "approval", {"by": "ana", "ok": True})
        assert sup.result(unit.id, timeout=30) == {"by": "ana", "ok": True}
        # Its progress message is its own again once the wait is over.
        assert sup.get(unit.id).progress_message == ""


def test_signals_sent_before_the_wait_are_kept_and_queue_in_order(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state") as sup:
        # A second unit holds the only slot, so the first is still pending when signalled.
        unit = sup.agent(collect, "vote", 3)
        for value in ("first", None, 3):
            assert sup.signal(unit.id, "vote", value)
        assert sup.signal(unit.id, "other", "not a vote")
        assert sup.result(unit.id, timeout=30) == ["first", None, 3]


def test_a_client_in_another_process_signals_through_the_ledger(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state) as sup:
        unit = sup.agent(approve)
        eventually(
            lambda: sup.get(unit.id).progress_message == "waiting for approval",
            what="the unit to wait",
        )
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "workunits._cli",
                "signal",
                "--state",
                str(state),
                unit.id,
                "approval",
                "--value",
                '{"ok": true}',
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        assert sup.result(unit.id, timeout=30) == {"ok": True}


def test_a_timeout_raises_signal_timeout_in_the_unit(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state") as sup:
        unit = sup.agent(wait_briefly, "approval", 0.05)
        with pytest.raises(wu.WorkFailed) as failed:
            sup.result(unit.id, timeout=30)
        cause = failed.value.__cause__  # the unit's own exception, rebuilt here
        assert isinstance(cause, wu.SignalTimeout)
        assert isinstance(cause, TimeoutError)
        assert "no signal 'approval' within 0.05 s" in str(cause)


def test_a_cancel_ends_the_wait(tmp_path: Path) -> None:
    with wu.Supervisor(tmp_path / "state") as sup:
        unit = sup.agent(approve)
        eventually(
            lambda: sup.get(unit.id).progress_message == "waiting for approval",
            what="the unit to wait",
        )
        assert sup.cancel(unit.id, grace=30)
        record = sup.wait(unit.id, timeout=10)  # well within the grace: the unit stopped itself
        assert (record.status, record.reason) == (wu.Status.KILLED, wu.Reason.CANCELLED)
        assert record.signal is None  # not SIGKILLed


def test_signal_to_an_ended_unit_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with wu.Supervisor(state) as sup:
        unit = sup.agent(wait_briefly, "approval", 0)
        sup.wait(unit.id, timeout=30)
        assert sup.signal(unit.id, "approval", 1) is False
        with wu.connect(state) as client:
            assert client.signal(unit.id, "approval", 1) is False
        with pytest.raises(wu.UnknownWork):
            sup.signal("a00000000", "approval", 1)
        with pytest.raises(wu.SpecError, match="signal name"):
            sup.signal(unit.id, "", 1)


def test_a_signal_to_a_unit_that_never_waits_is_refused(tmp_path: Path) -> None:
    """A shell runs a command, not code that could call ctx.wait_for: kept, it would
    wait in the ledger for nobody, and the sender would hear True."""
    state = tmp_path / "state"
    with wu.Supervisor(state) as sup:
        shell = sup.shell(["sleep", "30"])
        with pytest.raises(wu.SpecError, match="shell unit, which never waits for a signal"):
            sup.signal(shell.id, "approval", 1)
        with wu.connect(state) as client, pytest.raises(wu.SpecError, match="never waits"):
            client.signal(shell.id, "approval", 1)
        assert sup.kill(shell.id)


@pytest.mark.timeout(120)
def test_signals_outlive_a_sigkilled_supervisor(tmp_path: Path) -> None:
    """Consumed at the checkpoint: ``a`` is not received again, ``b`` is; ``c`` was sent
    while no supervisor ran and is received by the resumed attempt."""
    state = tmp_path / "state"
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.signal_host", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        work_id = json.loads(host.stdout.readline())["id"]
        with wu.connect(state) as client:
            assert client.signal(work_id, "a", 1)
            eventually(
                lambda: client.get(work_id).progress_message == "waiting for b",
                what="the checkpoint after a",
            )
            assert client.signal(work_id, "b", 2)
            eventually(
                lambda: client.get(work_id).progress_message == "waiting for c",
                what="b to be received",
            )
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=10)
            assert client.signal(work_id, "c", 3)  # no supervisor runs: kept in the ledger
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
        if host.stdout is not None:
            host.stdout.close()

    with wu.Supervisor(state) as sup:
        assert work_id in sup.recovered["resumed"]
        assert sup.result(work_id, timeout=30) == {
            "a": 1,
            "a_again": None,
            "b": 2,
            "c": 3,
            "attempt": 2,
        }
