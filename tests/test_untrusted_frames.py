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


def test_a_refusal_holds_after_readers_share_what_they_found() -> None:
    # Readers share one unpickler class and what it looked up: a frame one reader
    # loaded opens nothing for another, and a refused name stays refused.
    sent = frames.ReturnValue(pickle.dumps(1), "pickle")
    assert unit_frames().feed(encode(sent)) == [sent]
    for _ in range(2):
        with pytest.raises(pickle.UnpicklingError, match=r"posix\.getcwd"):
            unit_frames().feed(encode(_RunsCode()))
    assert unit_frames().feed(encode(sent)) == [sent]


# Frames only the supervisor sends (to a unit); every other frame class is a unit's to send.
TO_UNITS = {
    "CancelRequested",
    "SignalArrived",
    "Reply",
    "ChildEnded",
    "Deliver",
    "Stop",
    "ProxyCall",
}


def test_every_frame_a_unit_sends_is_allowed() -> None:
    defined = {
        name
        for name, value in vars(frames).items()
        if isinstance(value, type) and value.__module__ == frames.__name__
    }
    allowed = {name for module, name in FROM_UNITS if module == frames.__name__}
    assert defined - TO_UNITS - allowed == set(), "a new frame: allow it, or list it as TO_UNITS"
