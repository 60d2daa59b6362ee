"""Signals in the ledger, on both backends: kept in order, refused for an ended unit,
consumed with a checkpoint (one transaction), and the rest kept for a later attempt."""

from __future__ import annotations

import dataclasses

import pytest

from workunits._core.errors import SpecError, StaleAttempt, UnknownWork
from workunits._core.status import Status
from workunits._ledger import Ledger

from .support import new_unit, raw, start


def test_signals_are_kept_in_order_until_consumed_with_a_checkpoint(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger, max_attempts=2).id)
    seqs = [_sent(ledger, unit.id, "vote", value) for value in ("a", {"b": 2}, None)]
    other = _sent(ledger, new_unit(ledger).id, "vote", "elsewhere")
    assert seqs == sorted(seqs)
    kept = ledger.signals.open_for(unit.id)
    assert [(s.name, s.value) for s in kept] == [("vote", "a"), ("vote", {"b": 2}), ("vote", None)]
    assert [s.seq for s in ledger.signals.after(0)] == [*seqs, other]
    assert [s.seq for s in ledger.signals.after(seqs[1])] == [seqs[2], other]

    assert ledger.attempts.save_checkpoint_encoded(unit.id, 1, b'{"n": 1}', consumed=seqs[:2])
    assert [s.seq for s in ledger.signals.open_for(unit.id)] == [seqs[2]]
    assert ledger.units.require(unit.id).checkpoint == b'{"n": 1}'
    assert ledger.signals.last_seq() == other


def test_a_stale_checkpoint_consumes_nothing(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger, max_attempts=2).id)
    seq = _sent(ledger, unit.id, "go", 1)
    ledger.attempts.resume(unit.id, "s00000001", expected=1)
    with pytest.raises(StaleAttempt):
        ledger.attempts.save_checkpoint_encoded(unit.id, 1, b"{}", consumed=[seq])
    assert [s.seq for s in ledger.signals.open_for(unit.id)] == [seq]


def test_a_signal_for_an_ended_unit_is_not_kept(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    ended = dataclasses.replace(unit.to_record(), status=Status.COMPLETED, ended_at=3.0)
    assert ledger.attempts.write(ended, attempt=1)
    assert ledger.signals.send(unit.id, "go", 1) is None
    assert ledger.signals.open_for(unit.id) == []
    with pytest.raises(UnknownWork):
        ledger.signals.send("a00000000", "go", 1)
    with pytest.raises(SpecError, match="signal name"):
        ledger.signals.send(unit.id, "", 1)


def _sent(ledger: Ledger, work_id: str, name: str, value: object) -> int:
    seq = ledger.signals.send(work_id, name, value)
    assert seq is not None
    return seq


def test_an_ended_units_signals_are_consumed_at_its_end_and_go_with_it(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    _sent(ledger, unit.id, "approval", True)
    ledger.attempts.write(unit.id, attempt=1, status="completed")
    assert ledger.signals.open_for(unit.id) == []  # consumed at its end
    assert _rows(ledger, unit.id) == 1  # kept, consumed, while the unit is
    ledger.retention.expire_ended_before(cut=float("inf"))
    assert _rows(ledger, unit.id) == 0  # and gone with it


def _rows(ledger: Ledger, work_id: str) -> int:
    with raw(ledger) as conn:
        row = conn.execute("SELECT count(*) FROM signals WHERE unit = ?", (work_id,)).fetchone()
    return int(row[0])
