"""Every attempt leaves a record, one lost with its supervisor included (invariant 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

import workunits as wu
from tests.helpers import Host
from workunits import Reason, Status

pytestmark = pytest.mark.timeout(180)


def test_attempts_lost_with_their_supervisor_are_listed_with_cause_lost(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for expected in (1, 2):
        host = Host("attempt_host", str(state))
        try:
            answer = host.read()
            assert answer["attempt"] == expected
            work_id = answer["id"]
        finally:
            host.sigkill()
            host.close()
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        sup.signal(work_id, "approval", "granted")
        record = sup.wait(work_id, timeout=60)
        assert sup.result(work_id) == {"approved": "granted", "attempts": [1, 2, 3]}
    assert record.status is Status.COMPLETED
    assert record.attempt == 3
    assert [(a.attempt, a.reason) for a in record.attempts] == [
        (1, Reason.LOST),
        (2, Reason.LOST),
    ]
    for earlier in record.attempts:
        assert earlier.error is not None
        assert "its supervisor" in earlier.error
        assert "ended while it ran" in earlier.error


def test_a_retried_unit_lists_its_failures_and_its_lost_attempt(tmp_path: Path) -> None:
    state = tmp_path / "state"
    host = Host("attempt_host", str(state), "retry")
    try:
        answer = host.read()
        assert answer["attempt"] == 3  # two failures retried, the third waits
        work_id = answer["id"]
    finally:
        host.sigkill()
        host.close()
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        sup.signal(work_id, "approval", "granted")
        record = sup.wait(work_id, timeout=60)
    assert record.status is Status.COMPLETED
    assert record.attempt == 4
    assert [(a.attempt, a.reason) for a in record.attempts] == [
        (1, None),
        (2, None),
        (3, Reason.LOST),
    ]
    assert record.attempts[0].error is not None
    assert "attempt 1 fails" in record.attempts[0].error
