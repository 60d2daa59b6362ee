"""A state dir made by the previous release upgrades in place and its work carries on.

The fixture (tests/fixtures/state-v1.tar.gz, made by make_state_v1.py with the
release before ledger schema 2) holds what a SIGKILLed supervisor leaves:
running resumable agents with checkpoints, a running shell, a queued cancel,
a client-submitted pending shell and an unread notice.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

import workunits as wu
from workunits import Reason, Status

FIXTURE = Path(__file__).parent / "fixtures" / "state-v1.tar.gz"


@pytest.fixture
def old_state(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="tar")
    return tmp_path / "state"


def _by_key(client: wu.Client) -> dict[str, str]:
    return {row.key: row.id for row in client.rows() if row.key is not None}


@pytest.mark.timeout(120)
def test_the_previous_release_state_dir_is_migrated_and_resumed(old_state: Path) -> None:
    with wu.connect(old_state) as client:
        ids = _by_key(client)
    assert set(ids) == {"done", "survivor", "victim", "shell", "queued"}
    with wu.Supervisor(state_dir=old_state) as sup:
        survivor = sup.wait(ids["survivor"], timeout=60)
        assert survivor.status is Status.COMPLETED
        assert sup.result(ids["survivor"]) == {"attempt": 2, "checkpoint": {"value": 7}}
        victim = sup.wait(ids["victim"], timeout=60)
        assert victim.status is Status.KILLED  # its queued cancel won over its resume
        shell = sup.wait(ids["shell"], timeout=60)
        assert (shell.status, shell.reason) == (Status.FAILED, Reason.LOST)
        queued = sup.wait(ids["queued"], timeout=60)
        assert queued.status is Status.COMPLETED
        assert sup.read_output(ids["queued"]) == b"queued\n"
        assert sup.result(ids["done"]) == 42
    with wu.connect(old_state) as client:
        got = set()
        while (notice := client.notifications().get_nowait()) is not None:
            got.add(notice.id)
        # The old unread notice, and one for each unit that ended since.
        assert got == set(ids.values())
