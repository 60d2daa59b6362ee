"""The lifecycle (invariants 2, 3, 5): one enum, one terminal test, one table, one update."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workunits import InvalidTransition, Status, Supervisor, UnknownWork, WorkRecord, is_terminal
from workunits._core.record import replace
from workunits._core.status import TRANSITIONS, allowed
from workunits.supervisor.actor import requests as rq
from workunits.supervisor.actor.registry import Registry
from workunits.testing import ChangeLog, ScriptedDriver

P, R, C, F, K = Status.PENDING, Status.RUNNING, Status.COMPLETED, Status.FAILED, Status.KILLED

EXPECTED_STEPS = {(P, R), (P, K), (R, C), (R, F), (R, K)}


def record(status: Status = P, work_id: str = "x12345678") -> WorkRecord:
    return WorkRecord(
        id=work_id, kind="scripted", status=status, parent=None, description="", created_at=0.0
    )


def test_exactly_completed_failed_and_killed_are_terminal() -> None:
    assert {s for s in Status if is_terminal(s)} == {C, F, K}


def test_the_transition_table_is_forward_only() -> None:
    steps = {(old, new) for old, news in TRANSITIONS.items() for new in news}
    assert steps == EXPECTED_STEPS
    assert set(TRANSITIONS) == set(Status)
    for terminal in (C, F, K):
        assert TRANSITIONS[terminal] == frozenset()


@pytest.mark.parametrize(("old", "new"), list(itertools.product(Status, Status)))
def test_allowed_is_the_table_plus_staying_put(old: Status, new: Status) -> None:
    assert allowed(old, new) == (old == new or (old, new) in EXPECTED_STEPS)


def test_update_returning_the_same_object_writes_nothing() -> None:
    registry = Registry()
    registry.insert(record())
    before = registry.get("x12345678")
    old, new = registry.update("x12345678", lambda r: r)
    assert old is new is before
    assert registry.get("x12345678") is before


def test_update_stores_the_new_object() -> None:
    registry = Registry()
    registry.insert(record())
    old, new = registry.update("x12345678", lambda r: replace(r, status=R))
    assert old.status == P
    assert new is registry.get("x12345678")
    assert new.status == R


@pytest.mark.parametrize("terminal", [C, F, K])
@pytest.mark.parametrize("target", [P, R, C, F, K])
def test_terminal_is_permanent_and_leaving_it_is_ignored(terminal: Status, target: Status) -> None:
    registry = Registry()
    registry.insert(record())
    registry.update("x12345678", lambda r: replace(r, status=R))
    _, ended = registry.update("x12345678", lambda r: replace(r, status=terminal))
    if target == terminal:
        return
    old, new = registry.update("x12345678", lambda r: replace(r, status=target))
    assert new is old is ended, "a race such as 'exited after the kill' is ignored"


def test_a_terminal_record_still_takes_updates_that_keep_its_status() -> None:
    registry = Registry()
    registry.insert(replace(record(), status=C))
    _, new = registry.update("x12345678", lambda r: replace(r, output_offset=5))
    assert new.output_offset == 5
    assert new.status == C


@pytest.mark.parametrize(("old", "new"), [(P, C), (P, F), (R, P)])
def test_an_illegal_transition_raises_and_names_both_statuses(old: Status, new: Status) -> None:
    registry = Registry()
    registry.insert(record(old))
    with pytest.raises(InvalidTransition, match=f"{old.value} -> {new.value}"):
        registry.update("x12345678", lambda r: replace(r, status=new))
    assert registry.get("x12345678").status == old


@pytest.mark.parametrize("field", ["id", "kind", "parent"])
def test_an_update_may_not_change_identity(field: str) -> None:
    registry = Registry()
    registry.insert(record())
    changes: dict[str, Any] = {field: "x87654321"}
    with pytest.raises(InvalidTransition, match="id, kind or parent"):
        registry.update("x12345678", lambda r: replace(r, **changes))


def test_insert_refuses_a_second_record_with_the_same_id() -> None:
    registry = Registry()
    registry.insert(record())
    with pytest.raises(InvalidTransition, match="already registered"):
        registry.insert(record())


def test_update_of_an_unknown_id_is_unknown_work() -> None:
    with pytest.raises(UnknownWork):
        Registry().update("x12345678", lambda r: r)


@given(st.lists(st.sampled_from(list(Status)), max_size=12))
def test_any_sequence_of_updates_walks_only_the_table(targets: list[Status]) -> None:
    registry = Registry()
    registry.insert(record())
    path = [P]
    for target in targets:
        current = path[-1]
        try:
            _, new = registry.update("x12345678", _set_status(target))
        except InvalidTransition:
            assert not is_terminal(current)
            assert not allowed(current, target)
            continue
        if new.status != current:
            path.append(new.status)
    assert all((a, b) in EXPECTED_STEPS for a, b in itertools.pairwise(path))
    assert sum(is_terminal(s) for s in path) <= 1


def _set_status(status: Status) -> Callable[[WorkRecord], WorkRecord]:
    return lambda r: replace(r, status=status)


# -- through the supervisor: every write is one event, the same object is none ---


def test_the_supervisor_emits_no_event_for_a_same_object_update(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    changes = ChangeLog()
    msup._ask(rq.Subscribe(changes.on_change))
    unit = drive.start()
    seen = len(changes.since(0))
    unchanged = msup._ask(rq.Update(unit.id, lambda r: r))
    assert unchanged is msup.get(unit.id)
    assert changes.since(seen) == []
    drive.write(unit.id, b"abc")
    msup.read_output(unit.id)
    [(old, new)] = changes.since(seen)
    assert old is not None
    assert (old.output_offset, new.output_offset) == (0, 3)
    assert old is not new


def test_a_scripted_unit_walks_pending_running_terminal(
    msup: Supervisor, drive: ScriptedDriver
) -> None:
    changes = ChangeLog()
    msup._ask(rq.Subscribe(changes.on_change))
    unit = drive.start()
    drive.exit(unit.id, 0)
    statuses = [new.status for _, new in changes.since(0) if new.id == unit.id]
    assert statuses == [P, R, C]
    first_old = changes.since(0)[0][0]
    assert first_old is None
