"""A supervisor finds the units a lost COMMIT answer left out of its memory, and those nobody holds.

When even reading back cannot reach the ledger, a write may have landed unseen:
a submit whose unit is now this session's (and ``running``), or a claim that
landed after its session was taken over. Every ``RESCAN_EVERY`` seconds a
supervisor runs the units its session owns that memory lacks, and hands back
to the queue the pending units claimed by no live session -- so none is
stranded until its session ends.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.ledger.support import raw
from tests.pg_proxy import CommitCutter
from tests.postgres_server import PostgresServer
from workunits.supervisor.actor.recovery import LOST_TRACK

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def proxied(postgres_server: PostgresServer) -> Iterator[tuple[CommitCutter, str]]:
    with CommitCutter(postgres_server.socket_dir) as proxy, postgres_server.database() as url:
        yield proxy, proxy.url(urllib.parse.urlsplit(url).path.lstrip("/"))


def test_a_submit_that_could_not_be_read_back_raises_commit_unknown_and_still_runs(
    tmp_path: Path, proxied: tuple[CommitCutter, str]
) -> None:
    proxy, url = proxied
    out = tmp_path / "out"
    with wu.Supervisor(
        tmp_path / "state", ledger=url, install_signal_handlers=False, session_lease=60.0
    ) as sup:
        cut = proxy.arm(r"INSERT INTO units", refuse_after=True)
        with pytest.raises(wu.CommitUnknown) as raised:
            sup.shell(f"echo ran >> {out}", on_lost="restart")
        assert cut.fired.is_set()
        work_id = raised.value.work_id
        assert work_id is not None
        assert work_id in str(raised.value)
        proxy.refuse(False)
        # The row landed, this session's and running, in no memory: the rescan runs it.
        record = sup.wait(work_id, timeout=90)
    assert record.status is wu.Status.COMPLETED, record.error
    assert out.read_text() == "ran\n"  # once
    assert [(a.attempt, a.reason, a.error) for a in record.attempts] == [
        (1, wu.Reason.LOST, LOST_TRACK)
    ]


def test_a_pending_unit_claimed_by_a_session_taken_over_goes_back_to_the_queue(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with wu.connect(state) as client:
        work_id = client.shell("true").id  # pending, in nobody's hands
        ledger = client.ledger
        # Session x was taken over by y; a claim by x landed late (its answer lost):
        # no takeover will look at x again, and no claim picks a row x holds.
        ledger.sessions.open("s0000000x", 1)
        ledger.sessions.open("s0000000y", 2)
        ledger.sessions.take_over("s0000000y", exclusive=True)
        with raw(ledger) as conn:
            conn.execute("UPDATE units SET session = ? WHERE id = ?", ("s0000000x", work_id))
    with wu.Supervisor(state, install_signal_handlers=False) as sup:
        record = sup.wait(work_id, timeout=60)
    assert record.status is wu.Status.COMPLETED, record.error
