"""The classes the supervisor accepts from a unit's frames exist under the names it
allows (a renamed frame class would otherwise fail every unit that sends it), and
nothing else loads."""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Callable

import pytest

from workunits._util.framing import encode
from workunits._wire import frames
from workunits._wire.untrusted import FROM_UNITS, unit_frames


@pytest.mark.parametrize("where", sorted(FROM_UNITS), ids=lambda w: f"{w[0]}.{w[1]}")
def test_every_allowed_class_is_importable_under_its_name(where: tuple[str, str]) -> None:
    module, name = where
    assert isinstance(getattr(importlib.import_module(module), name), type)


def test_a_units_return_value_loads_as_sent() -> None:
    sent = frames.ReturnValue(pickle.dumps(42), "pickle")
    assert unit_frames().feed(encode(sent)) == [sent]


class _RunsCode:
    def __reduce__(self) -> tuple[Callable[[], str], tuple[()]]:
        return (os.getcwd, ())


def test_a_frame_that_names_any_other_callable_is_refused() -> None:
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.getcwd, which it may not send"):
        unit_frames().feed(encode(_RunsCode()))
