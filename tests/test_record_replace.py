"""``_core.record.replace``: ``dataclasses.replace``'s meaning at a third of its cost.

The supervisor copies a unit's record several times per unit; the copy is
generated per class from its fields. These tests hold it to
``dataclasses.replace`` for any set of changed fields, and check that classes
whose ``__init__`` does more than set fields still get ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workunits._core.record import Notification, Outcome, WorkRecord, replace
from workunits._core.sandbox import Sandbox
from workunits._core.status import Reason, Status

pytestmark = pytest.mark.timeout(60)

BASE = WorkRecord(
    id="b12345678",
    kind="shell",
    status=Status.RUNNING,
    parent="a87654321",
    description="x",
    created_at=1.0,
)

# A value of each field's type that differs from BASE's, to change it to.
CHANGED: dict[str, Any] = {
    "id": "bzzzzzzzz",
    "kind": "agent",
    "status": Status.COMPLETED,
    "parent": None,
    "description": "y",
    "created_at": 2.0,
    "started_at": 3.0,
    "ended_at": 4.0,
    "output_path": "/x",
    "output_offset": 5,
    "output_bytes": 6,
    "output_tail": b"tail",
    "exit_code": 1,
    "signal": 9,
    "error": "boom",
    "reason": Reason.KILLED,
    "notified": True,
    "acknowledged": True,
    "retain": 2,
    "evict_after": 7.0,
    "attempt": 3,
    "pid": 42,
    "progress": 0.5,
    "progress_message": "half",
    "result": b"1",
    "result_format": "json",
    "cause": b"c",
    "expired_at": 8.0,
    "progress_at": 9.0,
    "evidence": {"done": 3},
    "retry": None,
    "restart": None,
    "attempts": (),
    "retry_at": 10.0,
    "retry_of": "bxxxxxxxx",
    "stall_after": 11.0,
    "durable": False,
    "not_before": 12.0,
    "sandbox": Sandbox(network=False),
    "unenforced": ("memory: not here",),
}


def test_every_field_of_a_record_has_a_changed_value_here() -> None:
    assert set(CHANGED) == {f.name for f in dataclasses.fields(WorkRecord)}


@given(st.sets(st.sampled_from(sorted(CHANGED))))
def test_a_copy_equals_dataclasses_replace_and_leaves_the_original(names: set[str]) -> None:
    changes = {name: CHANGED[name] for name in names}
    copy = replace(BASE, **changes)
    assert copy == dataclasses.replace(BASE, **changes)
    assert type(copy) is WorkRecord
    for f in dataclasses.fields(WorkRecord):
        assert getattr(copy, f.name) == changes.get(f.name, getattr(BASE, f.name))
    assert BASE.status is Status.RUNNING  # the original is untouched
    assert BASE.pid is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.status = Status.FAILED  # type: ignore[misc]


def test_an_unknown_field_is_a_type_error_that_names_it() -> None:
    with pytest.raises(TypeError, match="no_such_field"):
        replace(BASE, no_such_field=1)  # type: ignore[call-arg]


def test_a_class_with_post_init_still_runs_it() -> None:
    # Outcome's __post_init__ makes its error storable: a NUL becomes U+FFFD.
    outcome = replace(Outcome(Status.FAILED, error="a"), error="b\x00c")
    assert outcome.error == "b\ufffdc"


@dataclass(frozen=True)
class _Counted:
    x: int
    seen: int = field(default=0, init=False)


@dataclass(frozen=True)
class _WithInitVar:
    x: int
    doubled: int = field(init=False)
    factor: InitVar[int] = 2

    def __post_init__(self, factor: int) -> None:
        object.__setattr__(self, "doubled", self.x * factor)


def test_classes_whose_init_does_more_than_set_fields_get_dataclasses_replace() -> None:
    counted = replace(_Counted(1), x=2)
    assert (counted.x, counted.seen) == (2, 0)
    with pytest.raises(ValueError, match="init=False"):
        replace(_Counted(1), seen=3)  # as dataclasses.replace refuses it
    assert replace(_WithInitVar(3, factor=5), x=4, factor=10).doubled == 40


def test_other_records_copy_the_same_way() -> None:
    notice = Notification.of(replace(BASE, status=Status.COMPLETED, ended_at=4.0))
    again = replace(notice, redelivered=True)
    assert again == dataclasses.replace(notice, redelivered=True)
