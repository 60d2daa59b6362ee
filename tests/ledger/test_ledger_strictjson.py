"""Checkpoints and JSON results come back equal, or are refused naming what and where."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from tests.ledger.support import new_unit, start
from workunits._ledger import Ledger, UnstorableValue
from workunits._util import strictjson


@dataclasses.dataclass
class Point:
    x: int


class Colour(enum.StrEnum):
    RED = "red"


REFUSED: list[tuple[Any, str, str]] = [
    ({"groups": [1, (2, 3)]}, "$['groups'][1]", "list(...)"),
    ({1: "one"}, "key 1", "str keys"),
    ({"big": 2**64}, "$['big']", "beyond 64 bits"),
    ({"small": -(2**63) - 1}, "$['small']", "beyond 64 bits"),
    ([float("nan")], "$[0]", "no NaN"),
    ([float("inf")], "$[0]", "no NaN or infinity"),
    ({"s": {1, 2}}, "$['s']", "sorted(...)"),
    ({"p": Point(1)}, "$['p']", "dataclasses.asdict"),
    ({"b": b"raw"}, "$['b']", "base64"),
    ({"c": Colour.RED}, "$['c']", "subclass of str"),
    ({"o": object()}, "$['o']", "JSON cannot hold"),
]


@pytest.mark.parametrize(("value", "path", "advice"), REFUSED)
def test_values_json_would_change_are_refused(value: Any, path: str, advice: str) -> None:
    with pytest.raises(UnstorableValue) as caught:
        strictjson.dumps(value, "checkpoint of a00000000")
    message = str(caught.value)
    assert "checkpoint of a00000000" in message
    assert path in message
    assert advice in message
    assert "nothing was stored" in message


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(UnstorableValue, match="contains itself"):
        strictjson.dumps(loop, "checkpoint")


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"group": 3, "done": ["a", "b"], "ratio": 0.1, "ok": True, "none": None},
        [2**64 - 1, -(2**63), -0.0, 1e300, "ünïcødé"],
        {"nested": {"deep": [[[]]]}},
    ],
)
def test_exact_json_round_trips(value: Any) -> None:
    data = strictjson.dumps(value, "checkpoint")
    assert strictjson.loads(data, "a00000000", "checkpoint") == value


def test_a_refused_checkpoint_leaves_the_previous_one(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    assert ledger.attempts.save_checkpoint(unit.id, 1, {"group": 2})
    with pytest.raises(UnstorableValue, match=r"checkpoint of a.* at \$\['group'\]"):
        ledger.attempts.save_checkpoint(unit.id, 1, {"group": (3,)})
    assert ledger.units.require(unit.id).last_checkpoint() == {"group": 2}


def test_results_are_json_when_exact_and_a_signed_pickle_otherwise(ledger: Ledger) -> None:
    exact, inexact = start(ledger, new_unit(ledger).id), start(ledger, new_unit(ledger).id)
    ledger.attempts.write(exact.id, attempt=1, status="completed", result={"n": [1, 2]})
    ledger.attempts.write(inexact.id, attempt=1, status="completed", result=(1, {2, 3}))
    exact_row, inexact_row = ledger.units.require(exact.id), ledger.units.require(inexact.id)
    assert exact_row.result is not None
    assert exact_row.result.format == "json"
    assert inexact_row.result is not None
    assert inexact_row.result.format == "pickle"
    assert inexact_row.result.mac is not None
    assert ledger.units.load_result(exact.id) == {"n": [1, 2]}
    assert ledger.units.load_result(inexact.id) == (1, {2, 3})


def test_a_json_only_result_is_refused_rather_than_pickled(ledger: Ledger) -> None:
    unit = start(ledger, new_unit(ledger).id)
    with pytest.raises(UnstorableValue, match="result of a"):
        ledger.attempts.write(
            unit.id, attempt=1, status="completed", result=(1, 2), json_result=True
        )
    # Nothing of that write landed: the unit still runs.
    assert ledger.units.require(unit.id).status == "running"
