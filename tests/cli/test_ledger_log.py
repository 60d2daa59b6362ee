"""``serve``'s log filter: a transient ledger failure is one line, once, until it is back."""

from __future__ import annotations

import logging

from workunits._cli.ledger_log import OneLinePerFailure
from workunits._core.errors import LedgerCorrupt, LedgerError


def _record(
    msg: str, exc: BaseException | None = None, name: str = "workunits.x", **extra: object
) -> logging.LogRecord:
    exc_info = None if exc is None else (type(exc), exc, exc.__traceback__)
    record = logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_transient_failure_is_said_once_in_one_line_without_its_traceback() -> None:
    keep = OneLinePerFailure()
    lost = LedgerError("lost the ledger db: server closed the connection\n\tThis probably means")
    first = _record("schedule nightly: could not fire", lost)
    assert keep.filter(first)
    assert first.exc_info is None
    assert first.getMessage() == (
        "schedule nightly: could not fire (LedgerError: lost the ledger db: server closed "
        "the connection)"
    )
    assert not keep.filter(_record("schedule nightly: could not fire", lost))


def test_the_pools_chatter_is_one_line_per_distinct_failure_whatever_the_address() -> None:
    keep = OneLinePerFailure()
    pool = "psycopg.pool"
    assert keep.filter(_record("discarding closed connection: <Conn [BAD] at 0x7f01>", name=pool))
    assert not keep.filter(
        _record("discarding closed connection: <Conn [BAD] at 0x9a02>", name=pool)
    )
    two_lines = _record("error connecting: refused\n\tis the server running?", name=pool)
    assert keep.filter(two_lines)
    assert two_lines.getMessage() == "error connecting: refused"


def test_once_the_ledger_answers_again_a_failure_is_said_again() -> None:
    keep = OneLinePerFailure()
    lost = LedgerError("lost the ledger db: refused")
    assert keep.filter(_record("heartbeat", lost))
    assert not keep.filter(_record("heartbeat", lost))
    assert keep.filter(_record("ledger: db answers again", ledger_recovered=True))
    assert keep.filter(_record("heartbeat", lost))


def test_other_records_pass_as_they_are() -> None:
    keep = OneLinePerFailure()
    damaged = _record("a bug", LedgerCorrupt("row x does not decode"))
    assert keep.filter(damaged)
    assert keep.filter(_record("a bug", LedgerCorrupt("row x does not decode")))
    assert damaged.exc_info is not None  # not a moment's failure: its traceback stays
    plain = _record("unit a1 started\nsecond line")
    assert keep.filter(plain)
    assert plain.getMessage() == "unit a1 started\nsecond line"
