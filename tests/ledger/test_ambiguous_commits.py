"""A COMMIT whose answer is lost, at the ledger's own writes, through a real proxy.

The proxy (``tests.pg_proxy``) sits between the ledger and a real PostgreSQL
server and cuts the connection right after forwarding a COMMIT (the write
landed, its writer never hears so) or instead of it (nothing landed). Each
write the ledger makes must then say what really happened, by reading back:
never "nothing was written" for a write that landed.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

import workunits as wu
from tests.pg_proxy import CommitCutter
from tests.postgres_server import PostgresServer
from workunits._core import ids
from workunits._core.record import Notification, WorkRecord, replace
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, NewUnit, Write
from workunits._ledger.writes import WriteOutcome as Outcome

pytestmark = pytest.mark.timeout(60)

SESSION = "s00000001"


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[CommitCutter]:
    with CommitCutter(postgres_server.socket_dir) as cutter:
        yield cutter


@pytest.fixture
def url(postgres_server: PostgresServer, proxy: CommitCutter) -> Iterator[str]:
    with postgres_server.database() as direct:
        yield proxy.url(urllib.parse.urlsplit(direct).path.lstrip("/"))


def _ledger(tmp_path: Path, url: str, **kwargs: object) -> Ledger:
    return Ledger(tmp_path / "state", ledger=url, **kwargs)  # type: ignore[arg-type]


def new_unit(
    ledger: Ledger,
    letter: str,
    *,
    key: str | None = None,
    session: str | None = None,
    started: bool = False,
) -> NewUnit:
    from operator import add  # noqa: PLC0415 - stored by reference

    work_id = ids.mint(letter)
    return NewUnit(
        work_id,
        "agent",
        ledger.units.encode_spec(Call(add, (1, 2)), work_id),
        1.0,
        key=key,
        max_attempts=3,
        resumable=True,
        session=session,
        started_at=2.0 if started else None,
    )


def test_a_submit_whose_commit_answer_is_lost_returns_its_unit(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        cut = proxy.arm(r"INSERT INTO units")
        new = new_unit(ledger, "a")
        row, created = ledger.units.submit(new)
        assert cut.fired.is_set(), "the proxy cut the submit's COMMIT"
        assert (row.id, created) == (new.id, True)
        assert [r.id for r in ledger.units.list()] == [new.id], "written once, not twice"


def test_a_submit_cut_before_its_commit_is_written_by_a_second_try(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        cut = proxy.arm(r"INSERT INTO units", mode="before")
        new = new_unit(ledger, "a")
        row, created = ledger.units.submit(new)
        assert cut.fired.is_set()
        assert (row.id, created) == (new.id, True)
        assert [r.id for r in ledger.units.list()] == [new.id]


def test_a_keyed_submit_whose_answer_is_lost_is_created_not_found(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        proxy.arm(r"INSERT INTO units")
        new = new_unit(ledger, "a", key="job-1")
        row, created = ledger.units.submit(new)
        assert (row.id, created) == (new.id, True)
        again, created = ledger.units.submit(new_unit(ledger, "a", key="job-1"))
        assert (again.id, created) == (new.id, False)


def test_a_submit_that_cannot_be_read_back_raises_commit_unknown_naming_its_unit(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url, settle_within=1.0, busy_timeout=1.0) as ledger:
        proxy.arm(r"INSERT INTO units", refuse_after=True)
        new = new_unit(ledger, "a", key="job-2")
        with pytest.raises(wu.CommitUnknown, match=new.id) as raised:
            ledger.units.submit(new)
        assert raised.value.work_id == new.id
        assert isinstance(raised.value, wu.LedgerError)
    proxy.refuse(False)
    # Settled later, both ways the error says (by a ledger that connects afresh).
    with _ledger(tmp_path, url) as later:
        found = later.units.get(new.id)
        assert found is not None
        assert found.status == Status.PENDING
        again, created = later.units.submit(new_unit(later, "a", key="job-2"))
        assert (again.id, created) == (new.id, False)


def _running(ledger: Ledger, key: str | None = None) -> WorkRecord:
    new = new_unit(ledger, "a", key=key)
    row, _ = ledger.units.submit(new)
    ledger.attempts.write(row.id, attempt=1, status=Status.RUNNING.value)
    found = ledger.units.get(row.id)
    assert found is not None
    return found.to_record()


def test_an_end_whose_commit_answer_is_lost_is_written_once_with_one_notice(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        record = _running(ledger)
        ended = _completed(record)
        cut = proxy.arm(r"INSERT INTO notifications")
        outcomes = ledger.attempts.write_many(
            [Write(ended, 1, notification=Notification.of(ended))]
        )
        assert cut.fired.is_set()
        assert outcomes == [Outcome.WRITTEN]
        row = ledger.units.get(record.id)
        assert row is not None
        assert row.status == Status.COMPLETED
        assert [n.id for n in ledger.outbox.undelivered(None)] == [record.id]


def _completed(record: WorkRecord) -> WorkRecord:
    return replace(record, status=Status.COMPLETED, ended_at=record.created_at + 1, exit_code=0)


def test_a_claim_of_pending_units_whose_answer_is_lost_returns_the_units_claimed(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        ledger.sessions.open(SESSION, 1)
        new = new_unit(ledger, "a")
        ledger.units.submit(new)
        cut = proxy.arm(r"SKIP LOCKED")
        claimed = ledger.claims.claim(SESSION, {}, 10)
        assert cut.fired.is_set()
        assert [r.id for r in claimed] == [new.id]
        row = ledger.units.get(new.id)
        assert row is not None
        assert row.session == SESSION


def test_a_takeover_whose_answer_is_lost_returns_the_sessions_and_units_taken(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        ledger.sessions.open("s00000002", 1, lease=0.5)
        new = new_unit(ledger, "a", session="s00000002", started=True)
        ledger.units.submit(new, wake=False)
        ledger.sessions.close("s00000002")
        ledger.sessions.open(SESSION, 1)
        cut = proxy.arm(r"SET recovered_by")
        won, rows = ledger.sessions.take_over(SESSION, exclusive=False)
        assert cut.fired.is_set()
        assert won == ["s00000002"]
        assert [r.id for r in rows] == [new.id]


def test_an_acknowledgement_whose_answer_is_lost_says_it_acknowledged(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        record = _running(ledger)
        ended = _completed(record)
        ledger.attempts.write_many([Write(ended, 1, notification=Notification.of(ended))])
        claimed = ledger.outbox.claim(None)
        assert claimed is not None
        cut = proxy.arm(r"SET delivered_at = \S+, claim_until = NULL")
        assert ledger.outbox.ack(record.id, claimed.token) is True
        assert cut.fired.is_set()
        assert ledger.outbox.undelivered(None) == []


def test_a_notice_claim_whose_answer_is_lost_hands_over_the_notice(
    tmp_path: Path, url: str, proxy: CommitCutter
) -> None:
    with _ledger(tmp_path, url) as ledger:
        record = _running(ledger)
        ended = _completed(record)
        ledger.attempts.write_many([Write(ended, 1, notification=Notification.of(ended))])
        cut = proxy.arm(r"SET claimed_by = \S+, claim_until")
        claimed = ledger.outbox.claim(None)
        assert cut.fired.is_set()
        assert claimed is not None
        assert claimed.notice.id == record.id
        assert ledger.outbox.ack(record.id, claimed.token) is True
