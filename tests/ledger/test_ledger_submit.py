"""Idempotent submit (invariant 12), also from several processes at once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.ledger.support import (
    ManualClock,
    new_unit,
    raw,
    read_line,
    send,
    spawn_all,
    start,
    submit,
)
from workunits._core import ids as _ids
from workunits._core.errors import IdempotencyConflict, SpecError, WorkunitsError
from workunits._core.status import Status
from workunits._ledger import Call, Ledger, LedgerError, NewUnit


def test_a_submit_is_a_pending_row(ledger: Ledger) -> None:
    row, created = submit(ledger, key="job-1", parent="a00000000")
    assert created
    assert row.status == Status.PENDING
    assert row.attempt == 1
    assert ledger.units.require(row.id) == row


@pytest.mark.parametrize("status", ["pending", "running", "completed", "failed", "killed"])
def test_the_same_key_and_spec_returns_the_unit_whatever_its_status(
    ledger: Ledger, status: str
) -> None:
    first = new_unit(ledger, key="job-1")
    if status != "pending":
        start(ledger, first.id)
    if status not in ("pending", "running"):
        ledger.attempts.write(first.id, attempt=1, status=status)
    again, created = submit(ledger, key="job-1")
    assert not created
    assert again.id == first.id
    assert again.status == status
    assert len(ledger.units.list()) == 1


def test_the_same_key_returns_an_expired_unit_too(ledger: Ledger, clock: ManualClock) -> None:
    first = start(ledger, new_unit(ledger, key="job-1").id)
    ledger.attempts.write(first.id, attempt=1, status="completed")
    clock.advance(1000)
    assert ledger.retention.expire() == 1
    again, created = submit(ledger, key="job-1")
    assert (again.id, created, again.shown_status) == (first.id, False, "expired")


def test_the_same_key_with_other_arguments_is_a_conflict_naming_key_and_unit(
    ledger: Ledger,
) -> None:
    first = new_unit(ledger, key="job-1", args=(1, 2))
    with pytest.raises(IdempotencyConflict) as caught:
        submit(ledger, key="job-1", args=(1, 3))
    assert "'job-1'" in str(caught.value)
    assert first.id in str(caught.value)
    assert len(ledger.units.list()) == 1


def test_the_same_key_for_another_kind_is_a_conflict(ledger: Ledger) -> None:
    new_unit(ledger, key="job-1", kind="agent")
    with pytest.raises(IdempotencyConflict):
        submit(ledger, key="job-1", kind="dream")


def test_without_a_key_every_submit_is_a_new_unit(ledger: Ledger) -> None:
    ids = {new_unit(ledger).id for _ in range(3)}
    assert len(ids) == 3


def test_an_id_already_in_the_ledger_is_refused(ledger: Ledger) -> None:
    row = new_unit(ledger)
    assert row.spec is not None
    with pytest.raises(LedgerError, match="mint another"):
        ledger.units.submit(NewUnit(row.id, "agent", row.spec, 1.0))


def test_a_malformed_id_never_reaches_the_database(ledger: Ledger) -> None:
    spec = ledger.units.encode_spec(Call(print), "a00000000")
    with pytest.raises(ValueError, match="not a work unit ID"):
        ledger.units.submit(NewUnit("a'; DROP TABLE units; --", "agent", spec, 1.0))


@pytest.mark.timeout(120)
def test_concurrent_submits_from_eight_processes_make_one_unit_per_key(
    state_dir: Path, ledger_url: str | None
) -> None:
    keys = 40
    # The ledger does not exist yet: the workers also race to create it.
    argvs = [("submit", str(state_dir), str(keys), str(seed)) for seed in range(8)]
    with spawn_all(argvs, ledger_url) as workers:
        for worker in workers:
            send(worker, "go")
        answers = [json.loads(read_line(w)) for w in workers for _ in range(keys)]
        for worker in workers:
            assert worker.wait(60) == 0

    ids_by_key: dict[str, set[str]] = {}
    for answer in answers:
        ids_by_key.setdefault(answer["key"], set()).add(answer["id"])
    assert all(len(ids) == 1 for ids in ids_by_key.values()), ids_by_key
    created = Counter(a["key"] for a in answers if a["created"])
    assert created == Counter({f"k{i}": 1 for i in range(keys)})

    with Ledger(state_dir, ledger=ledger_url) as ledger, raw(ledger) as conn:
        rows = [(r[0], r[1]) for r in conn.execute("SELECT key, id FROM units")]
    assert len(rows) == keys
    assert {key: {work_id} for key, work_id in rows} == ids_by_key
    assert all(_ids.is_valid(work_id) for _, work_id in rows)


def test_submit_many_answers_each_submit_in_one_transaction(ledger: Ledger) -> None:
    first = new_unit(ledger, key="taken", args=(1, 1))

    def new(key: str | None, args: tuple[int, int]) -> NewUnit:
        work_id = _ids.mint("a")
        return NewUnit(
            work_id, "agent", ledger.units.encode_spec(Call(max, args), work_id), 1.0, key=key
        )

    batch = [new("a", (1, 2)), new("a", (1, 2)), new("taken", (9, 9)), new(None, (0, 0))]
    answers = ledger.units.submit_many(batch)
    assert not isinstance(answers[0], WorkunitsError)
    assert answers[0] == (ledger.units.require(batch[0].id), True)
    assert answers[1] == (answers[0][0], False)  # the same key within one batch
    assert isinstance(answers[2], IdempotencyConflict)
    assert first.id in str(answers[2])
    assert not isinstance(answers[3], WorkunitsError)
    assert answers[3][1]
    assert len(ledger.units.list()) == 3


def test_submit_many_fails_only_the_submit_whose_text_the_ledger_refuses(ledger: Ledger) -> None:
    def new(description: str) -> NewUnit:
        work_id = _ids.mint("a")
        spec = ledger.units.encode_spec(Call(max, (1, 2)), work_id)
        return NewUnit(work_id, "agent", spec, 1.0, description=description)

    batch = [new("fine"), new("bad \udcff bytes"), new("also fine")]
    answers = ledger.units.submit_many(batch)
    assert isinstance(answers[1], SpecError)
    assert "not UTF-8" in str(answers[1])
    assert [a[1] for a in (answers[0], answers[2]) if not isinstance(a, WorkunitsError)] == [
        True,
        True,
    ]
    assert {r.id for r in ledger.units.list()} == {batch[0].id, batch[2].id}


@pytest.mark.parametrize("field", ["description", "key"])
def test_submit_many_refuses_a_nul_in_submitted_text_and_keeps_the_rest(
    ledger: Ledger, field: str
) -> None:
    """PostgreSQL's text cannot hold NUL: both ledgers refuse it at submit, and the
    submits of the same group commit are written."""

    def new(text: str | None = None) -> NewUnit:
        work_id = _ids.mint("a")
        spec = ledger.units.encode_spec(Call(max, (1, 2)), work_id)
        if text is None:
            return NewUnit(work_id, "agent", spec, 1.0)
        if field == "key":
            return NewUnit(work_id, "agent", spec, 1.0, key=text)
        return NewUnit(work_id, "agent", spec, 1.0, description=text)

    batch = [new(), new("a\x00b"), new()]
    answers = ledger.units.submit_many(batch)
    assert isinstance(answers[1], SpecError)
    assert f"the {field} 'a\\x00b' holds a NUL character" in str(answers[1])
    assert {r.id for r in ledger.units.list()} == {batch[0].id, batch[2].id}
