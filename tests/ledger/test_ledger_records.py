"""Records as the supervisor holds them: encoded results and causes, progress, round trips."""

from __future__ import annotations

import dataclasses
import pathlib
from pathlib import Path
from typing import Any

import cloudpickle
import orjson
import pytest

from tests.ledger.support import new_unit, raw, start
from workunits._core.record import WorkRecord
from workunits._core.status import Status
from workunits._ledger import Ledger, LedgerTampered
from workunits._ledger.unreadable import Unreadable


class Toucher:
    """Unpickling it creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (self.marker,))


def _ended(ledger: Ledger, **changes: Any) -> WorkRecord:
    unit = start(ledger, new_unit(ledger).id)
    record = dataclasses.replace(unit.to_record(), ended_at=3.0, **changes)
    assert ledger.attempts.write(record, attempt=1)
    return record


def test_a_records_json_result_is_stored_as_it_is_and_signed(ledger: Ledger) -> None:
    record = _ended(
        ledger, status=Status.COMPLETED, result=orjson.dumps([1, 2]), result_format="json"
    )
    row = ledger.units.require(record.id)
    assert row.result is not None
    assert (row.result.format, row.result.data) == ("json", b"[1,2]")
    assert row.result.mac is not None  # what a caller acts on is bound to this unit
    assert ledger.units.load_result(record.id) == [1, 2]
    assert row.to_record().result == orjson.dumps([1, 2])
    assert row.to_record().result_format == "json"


def test_a_records_pickled_result_and_cause_are_signed(ledger: Ledger) -> None:
    cause = cloudpickle.dumps(ValueError("bad input"))
    record = _ended(
        ledger,
        status=Status.FAILED,
        result=cloudpickle.dumps({1, 2}),
        result_format="pickle",
        cause=cause,
        error="ValueError: bad input",
    )
    row = ledger.units.require(record.id)
    assert row.result is not None
    assert row.cause is not None
    assert row.result.mac is not None
    assert row.cause.mac is not None
    assert ledger.units.load_result(record.id) == {1, 2}
    back = row.to_record()
    assert (back.result, back.result_format, back.cause) == (
        record.result,
        "pickle",
        cause,
    )


@pytest.mark.parametrize("column", ["result", "cause"])
def test_a_tampered_pickle_in_a_row_makes_reading_it_fail(
    ledger: Ledger, tmp_path: Path, column: str
) -> None:
    marker = tmp_path / "ran"
    record = _ended(
        ledger,
        status=Status.FAILED,
        result=cloudpickle.dumps("fine"),
        result_format="pickle",
        cause=cloudpickle.dumps(RuntimeError("x")),
    )
    with raw(ledger) as conn:
        evil = cloudpickle.dumps(Toucher(marker))
        conn.execute(f"UPDATE units SET {column} = ? WHERE id = ?", (evil, record.id))  # noqa: S608
    with pytest.raises(LedgerTampered, match=f"unit {record.id}: the stored {column}"):
        ledger.units.get(record.id)
    # A listing leaves it out (the others are listed) and says why.
    left_out: list[Unreadable] = []
    assert ledger.units.list(on_unreadable=left_out.append) == []
    assert [bad.id for bad in left_out] == [record.id]
    assert isinstance(left_out[0].error, LedgerTampered)
    assert not marker.exists()


def test_a_later_write_without_the_result_keeps_it(ledger: Ledger) -> None:
    record = _ended(
        ledger, status=Status.COMPLETED, result=orjson.dumps("done"), result_format="json"
    )
    bare = dataclasses.replace(record, result=None, result_format=None, pid=99)
    assert ledger.attempts.write(bare, attempt=1)
    row = ledger.units.require(record.id)
    assert row.pid == 99
    assert ledger.units.load_result(record.id) == "done"


def test_progress_is_mirrored_from_the_record(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    record = dataclasses.replace(unit.to_record(), progress=0.75, progress_message="6/8")
    assert ledger.attempts.write(record, attempt=1)
    row = ledger.units.require(unit.id)
    assert (row.progress, row.progress_message) == (0.75, "6/8")
    assert row.to_record() == record
