"""Fenced writes (invariant 13), the lifecycle in the ledger, and the outbox (invariant 11)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.ledger.support import new_unit, raw, start
from workunits._core.errors import InvalidTransition, SpecError, StaleAttempt, UnknownWork
from workunits._core.record import Notification
from workunits._core.status import Reason, Status
from workunits._ledger import Ledger, LedgerCorrupt, Write, WriteOutcome
from workunits._ledger.rows import RECORD_COLUMNS
from workunits._ledger.unreadable import Unreadable
from workunits._ledger.writes import record_columns

SESSION = "s00000001"


def _outbox(ledger: Ledger) -> list[tuple[str, str]]:
    with raw(ledger) as conn:
        rows = conn.execute("SELECT id, status FROM notifications ORDER BY seq").fetchall()
    return [(str(row[0]), str(row[1])) for row in rows]


def _resumed(ledger: Ledger) -> str:
    """A unit on its second attempt: attempt 1 is stale."""
    unit = start(ledger, new_unit(ledger, max_attempts=3).id, session="s00000000")
    assert ledger.attempts.resume(unit.id, SESSION) == 2
    return unit.id


def test_a_record_is_written_with_its_mirrored_columns(ledger: Ledger) -> None:
    unit = new_unit(ledger)
    record = dataclasses.replace(
        unit.to_record(), status=Status.RUNNING, started_at=5.0, pid=4242, progress_message="go"
    )
    assert ledger.attempts.write(record, attempt=1)
    row = ledger.units.require(unit.id)
    assert (row.status, row.started_at, row.pid, row.progress_message) == (
        "running",
        5.0,
        4242,
        "go",
    )
    assert row.to_record() == dataclasses.replace(record, output_offset=0)


def test_an_end_whose_text_holds_a_nul_is_written_on_every_ledger(
    ledger: Ledger, backend: str
) -> None:
    """A unit's error and progress message are its own free text: a NUL in them
    (PostgreSQL's text cannot hold one) must not keep its end from landing."""
    unit = start(ledger, new_unit(ledger, parent="a99999999").id)
    ended = dataclasses.replace(
        unit.to_record(),
        status=Status.FAILED,
        ended_at=9.0,
        error="ValueError: bad\x00byte",
        progress_message="half\x00way",
    )
    assert ledger.attempts.write(ended, attempt=1)
    row = ledger.units.require(unit.id)
    kept = "\x00" if backend == "sqlite" else "\ufffd"  # PostgreSQL: shown as U+FFFD
    assert (row.status, row.error, row.progress_message) == (
        "failed",
        f"ValueError: bad{kept}byte",
        f"half{kept}way",
    )
    assert _outbox(ledger) == [(unit.id, "failed")]


def test_a_terminal_write_commits_its_notice_in_the_same_transaction(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger, parent="a99999999").id)
    ended = dataclasses.replace(
        unit.to_record(),
        status=Status.FAILED,
        ended_at=9.0,
        exit_code=3,
        error="boom",
        output_tail=b"last words",
        output_bytes=10,
    )
    assert ledger.attempts.write(ended, attempt=1)
    assert _outbox(ledger) == [(unit.id, "failed")]
    (notice,) = ledger.outbox.undelivered("a99999999")
    assert notice == Notification.of(dataclasses.replace(ended, notified=True))
    assert ledger.units.require(unit.id).expire_at == 9.0 + 100.0


def test_a_given_notification_is_stored_as_given(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ended = dataclasses.replace(
        unit.to_record(), status=Status.KILLED, ended_at=4.0, reason=Reason.CANCELLED
    )
    notice = Notification.of(ended)
    assert ledger.attempts.write(ended, attempt=1, notification=notice)
    assert ledger.outbox.undelivered(None) == [notice]


def test_a_notification_must_match_its_transition(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ended = dataclasses.replace(unit.to_record(), status=Status.COMPLETED, ended_at=4.0)
    wrong = Notification.of(dataclasses.replace(ended, status=Status.FAILED))
    with pytest.raises(InvalidTransition, match="not for this transition"):
        ledger.attempts.write(ended, attempt=1, notification=wrong)
    with pytest.raises(InvalidTransition, match="only with the terminal transition"):
        ledger.attempts.write(unit.id, attempt=1, pid=7, notification=Notification.of(ended))
    assert ledger.units.require(unit.id).status == Status.RUNNING
    assert _outbox(ledger) == []


def test_terminal_is_permanent_and_a_late_write_is_ignored(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    assert ledger.attempts.write(unit.id, attempt=1, status="killed", reason=Reason.KILLED)
    assert not ledger.attempts.write(unit.id, attempt=1, status="completed", exit_code=0)
    row = ledger.units.require(unit.id)
    assert (row.status, row.exit_code, row.reason) == ("killed", None, Reason.KILLED)
    assert _outbox(ledger) == [(unit.id, "killed")]
    # A write that keeps the terminal status still lands (a saved read offset, say).
    assert ledger.attempts.write(unit.id, attempt=1, output_offset=2)
    assert ledger.units.require(unit.id).output_offset == 2


def test_a_transition_the_table_forbids_raises(ledger: Ledger) -> None:
    unit = new_unit(ledger)
    with pytest.raises(InvalidTransition, match="pending -> completed"):
        ledger.attempts.write(unit.id, attempt=1, status="completed")
    start(ledger, unit.id)
    with pytest.raises(InvalidTransition, match="running -> pending"):
        ledger.attempts.write(unit.id, attempt=1, status="pending")


def test_a_cancel_before_start_ends_a_pending_unit_killed(ledger: Ledger) -> None:
    unit = new_unit(ledger)
    assert ledger.attempts.write(unit.id, attempt=1, status="killed", reason=Reason.CANCELLED)
    assert ledger.units.require(unit.id).reason == Reason.CANCELLED
    assert _outbox(ledger) == [(unit.id, "killed")]


def test_writes_name_unknown_units_and_columns(ledger: Ledger) -> None:
    with pytest.raises(UnknownWork, match="a12345678"):
        ledger.attempts.write("a12345678", attempt=1, pid=1)
    unit = new_unit(ledger)
    with pytest.raises(SpecError, match=r"no writable column.*'colour'"):
        ledger.attempts.write(unit.id, attempt=1, colour="blue")
    with pytest.raises(SpecError, match="'done' is not a status"):
        ledger.attempts.write(unit.id, attempt=1, status="done")


# -- fencing ---------------------------------------------------------------------------


def test_a_stale_attempts_write_is_refused_and_changes_nothing(ledger: Ledger) -> None:
    work_id = _resumed(ledger)
    before = ledger.units.require(work_id)
    with pytest.raises(StaleAttempt) as caught:
        ledger.attempts.write(work_id, attempt=1, status="completed", result=42)
    assert (caught.value.attempt, caught.value.current) == (1, 2)
    assert "attempt 1 refused, the current attempt is 2" in str(caught.value)
    assert ledger.units.require(work_id) == before
    assert _outbox(ledger) == []
    assert ledger.attempts.write(work_id, attempt=2, status="completed", result=42)
    assert ledger.units.load_result(work_id) == 42


def test_a_stale_checkpoint_is_refused(ledger: Ledger) -> None:
    work_id = _resumed(ledger)
    assert ledger.attempts.save_checkpoint(work_id, 2, {"group": 1})
    with pytest.raises(StaleAttempt):
        ledger.attempts.save_checkpoint(work_id, 1, {"group": 5})
    assert ledger.units.require(work_id).last_checkpoint() == {"group": 1}


def test_a_checkpoint_after_the_end_is_not_kept(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    assert not ledger.attempts.save_checkpoint(unit.id, 1, {"late": True})
    assert ledger.units.require(unit.id).checkpoint is None


def test_progress_batches_drop_stale_and_ended_units(ledger: Ledger) -> None:
    resumed = _resumed(ledger)
    running = start(ledger, new_unit(ledger).id).id
    ended = start(ledger, new_unit(ledger).id).id
    ledger.attempts.write(ended, attempt=1, status="completed")
    written = ledger.attempts.write_progress_batch(
        [
            (resumed, 1, 0.9, "stale"),
            (resumed, 2, 0.25, "2/8"),
            (running, 1, 0.5, None),
            (ended, 1, 1.0, "late"),
        ]
    )
    assert written == 2
    assert (
        ledger.units.require(resumed).progress,
        ledger.units.require(resumed).progress_message,
    ) == (
        0.25,
        "2/8",
    )
    assert ledger.units.require(running).progress == 0.5
    assert ledger.units.require(ended).progress is None
    assert ledger.attempts.write_progress_batch([]) == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan"), "half", True])
def test_progress_must_be_a_fraction(ledger: Ledger, fraction: object) -> None:
    unit = start(ledger, new_unit(ledger).id)
    with pytest.raises(ValueError, match=r"number in \[0, 1\]"):
        ledger.attempts.write_progress_batch([(unit.id, 1, fraction, None)])  # type: ignore[list-item]


def test_write_many_reports_each_outcome_and_applies_the_rest(ledger: Ledger) -> None:
    resumed = _resumed(ledger)
    pending = new_unit(ledger).id
    ended = start(ledger, new_unit(ledger).id).id
    ledger.attempts.write(ended, attempt=1, status="failed")
    outcomes = ledger.attempts.write_many(
        [
            Write(resumed, 1, {"progress": 0.5}),
            Write(pending, 1, {"status": "running"}),
            Write(ended, 1, {"status": "completed"}),
            Write(resumed, 2, {"status": "completed"}),
        ]
    )
    assert outcomes == [
        WriteOutcome.STALE,
        WriteOutcome.WRITTEN,
        WriteOutcome.IGNORED,
        WriteOutcome.WRITTEN,
    ]
    assert ledger.units.require(pending).status == Status.RUNNING
    assert ledger.units.require(ended).status == Status.FAILED
    assert sorted(_outbox(ledger)) == sorted([(ended, "failed"), (resumed, "completed")])


def test_begin_attempt_resumes_a_running_unit_under_a_new_session(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger, max_attempts=2).id, session="s00000000")
    ledger.attempts.save_checkpoint(unit.id, 1, {"group": 3})
    assert ledger.attempts.resume(unit.id, SESSION, expected=1) == 2
    row = ledger.units.require(unit.id)
    assert (row.attempt, row.session, row.status) == (2, SESSION, Status.RUNNING)
    assert row.last_checkpoint() == {"group": 3}
    with pytest.raises(InvalidTransition, match="used 2 of 2 attempts"):
        ledger.attempts.resume(unit.id, SESSION)
    with pytest.raises(StaleAttempt):
        ledger.attempts.resume(unit.id, SESSION, expected=1)


def test_begin_attempt_refuses_units_that_are_not_running(ledger: Ledger) -> None:
    pending = new_unit(ledger, max_attempts=5)
    with pytest.raises(InvalidTransition, match="pending"):
        ledger.attempts.resume(pending.id, SESSION)
    ledger.attempts.write(pending.id, attempt=1, status="killed")
    with pytest.raises(InvalidTransition, match="killed"):
        ledger.attempts.resume(pending.id, SESSION)
    with pytest.raises(UnknownWork):
        ledger.attempts.resume("a12345678", SESSION)


# -- corrupt rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("status", "paused", "column status holds 'paused', which is not a known Status"),
        ("reason", "bored", "column reason holds 'bored', which is not a known Reason"),
        ("parent", "../x", "column parent holds '../x', which is not a known work unit ID"),
        # PostgreSQL's typed columns refuse such a value outright.
        pytest.param(
            "attempt",
            "two",
            "column attempt holds str 'two', not int",
            marks=pytest.mark.sqlite_only,
        ),
        pytest.param(
            "resumable",
            "yes",
            "column resumable holds str 'yes', not int",
            marks=pytest.mark.sqlite_only,
        ),
        pytest.param(
            "output_tail",
            "text",
            "column output_tail holds str 'text', not bytes",
            marks=pytest.mark.sqlite_only,
        ),
    ],
)
def test_a_corrupt_row_names_the_unit_and_column(
    ledger: Ledger, column: str, value: object, message: str
) -> None:
    unit = new_unit(ledger)
    with raw(ledger) as conn:
        conn.execute(f"UPDATE units SET {column} = ? WHERE id = ?", (value, unit.id))  # noqa: S608
    with pytest.raises(LedgerCorrupt) as caught:
        ledger.units.require(unit.id)
    assert f"unit {unit.id}" in str(caught.value)
    assert message in str(caught.value)
    assert "restore the ledger from a backup (`workunits backup` makes one" in str(caught.value)


def test_a_row_whose_id_was_changed_is_corrupt_for_every_read_not_a_bad_argument(
    ledger: Ledger,
) -> None:
    """The caller passed no ID: InvalidWorkId would blame them for the ledger's row."""
    unit = new_unit(ledger)
    with raw(ledger) as conn:
        conn.execute("UPDATE units SET id = 'BAD/../x' WHERE id = ?", (unit.id,))
    left_out: list[Unreadable] = []
    assert ledger.units.list(on_unreadable=left_out.append) == []
    (bad,) = left_out
    assert bad.id == "BAD/../x"
    assert isinstance(bad.error, LedgerCorrupt)
    assert "a units row has id 'BAD/../x', which is not an ID" in str(bad.error)


def test_a_corrupt_checkpoint_names_the_unit_and_column(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    with raw(ledger) as conn:
        conn.execute("UPDATE units SET checkpoint = ? WHERE id = ?", (b"{not json", unit.id))
    row = ledger.units.require(unit.id)  # reading the row still works
    with pytest.raises(LedgerCorrupt, match=f"unit {unit.id}: column checkpoint"):
        row.last_checkpoint()


@pytest.mark.parametrize("column", ["checkpoint", "result"])
def test_a_json_column_that_does_not_parse_says_how_to_repair_the_row(
    ledger: Ledger, column: str
) -> None:
    """As every other corrupt column does: the unit, the column, and what to do."""
    unit = start(ledger, new_unit(ledger).id)
    sets = f"{column} = ?" + (", result_format = 'json'" if column == "result" else "")
    with raw(ledger) as conn:
        conn.execute(f"UPDATE units SET {sets} WHERE id = ?", (b"{not json", unit.id))  # noqa: S608

    def read() -> object:
        if column == "result":
            return ledger.units.load_result(unit.id)
        return ledger.units.require(unit.id).last_checkpoint()

    with pytest.raises(LedgerCorrupt) as caught:
        read()
    message = str(caught.value)
    assert f"unit {unit.id}: column {column} does not hold valid JSON" in message
    assert message.endswith("or delete that unit's row"), message
    assert "restore the ledger from a backup (`workunits backup` makes one" in message


def test_a_corrupt_status_is_reported_by_writes_too(ledger: Ledger) -> None:
    unit = new_unit(ledger)
    with raw(ledger) as conn:
        conn.execute("UPDATE units SET status = 'paused' WHERE id = ?", (unit.id,))
    with pytest.raises(LedgerCorrupt, match=f"unit {unit.id}: column status"):
        ledger.attempts.write(unit.id, attempt=1, status="running")


def test_record_columns_are_exactly_the_mirrored_columns(ledger: Ledger) -> None:
    record = new_unit(ledger).to_record()
    assert tuple(record_columns(record)) == RECORD_COLUMNS


def test_a_checkpoint_encoded_by_the_unit_is_stored_as_it_is(ledger: Ledger) -> None:
    work_id = _resumed(ledger)
    assert ledger.attempts.save_checkpoint_encoded(work_id, 2, b'{"group":4}')
    assert ledger.units.require(work_id).last_checkpoint() == {"group": 4}
    with pytest.raises(StaleAttempt):
        ledger.attempts.save_checkpoint_encoded(work_id, 1, b'{"group":5}')
    with pytest.raises(ValueError, match="not valid JSON"):
        ledger.attempts.save_checkpoint_encoded(work_id, 2, b"{group: 5")
    assert ledger.units.require(work_id).last_checkpoint() == {"group": 4}
