"""One tree of errors: what workunits raises at a user is a WorkunitsError.

The tree drawn in ``workunits._core.errors``' docstring is checked against the
classes, so the drawing cannot drift; the holes it once had (a bare
TimeoutError from a mailbox, a RuntimeError from ``wu.current()``) each have a
test here that a standard ``except`` still catches them.
"""

from __future__ import annotations

import asyncio
import builtins
import re
from pathlib import Path

import pytest

import workunits as wu
from workunits._core import errors as _errors
from workunits._core.mailbox import Mailbox

_ROW = re.compile(r"^(?P<indent>[│ ]*)[├└]── (?P<name>\w+)\s+(?P<text>.*)$")
_ALSO = re.compile(r"\(also an? (\w+)\)")


def drawn_tree() -> dict[str, tuple[str, list[str]]]:
    """{class name: (parent drawn, standard bases named by "(also a X)")} from the docstring."""
    doc = _errors.__doc__
    assert doc is not None
    tree: dict[str, tuple[str, list[str]]] = {}
    parents = ["WorkunitsError"]
    last = "WorkunitsError"
    for line in doc.splitlines():
        row = _ROW.match(line)
        if row is None:
            if last in tree and line.startswith(("│", "  ")):  # a row's second line
                tree[last][1].extend(_ALSO.findall(line))
            continue
        depth = len(row["indent"]) // 4
        if depth == len(parents):
            parents.append(last)
        del parents[depth + 1 :]
        last = row["name"]
        tree[last] = (parents[depth], _ALSO.findall(row["text"]))
    return tree


def test_the_drawing_in_the_errors_docstring_is_true() -> None:
    tree = drawn_tree()
    classes = {
        name: value
        for name, value in vars(_errors).items()
        if isinstance(value, type)
        and issubclass(value, _errors.WorkunitsError)
        and value is not _errors.WorkunitsError
    }
    assert set(tree) == set(classes), "every error is drawn, and only errors"
    for name, (parent, standard) in tree.items():
        cls = classes[name]
        assert cls.__bases__[0].__name__ == parent, name
        for drawn in standard:
            assert issubclass(cls, getattr(builtins, drawn)), f"{name} is not a {drawn}"
        # A second base not drawn would be a surprise to the reader of the tree.
        for base in cls.__bases__[1:]:
            assert base.__name__ in standard, f"{name} also derives from {base.__name__}: draw it"


def test_every_error_class_is_public() -> None:
    tree = drawn_tree()
    for name in tree:
        module = wu.testing if name == "NotRunning" else wu
        assert getattr(module, name) is getattr(_errors, name)


def test_current_outside_a_unit_is_a_workunits_error_and_a_runtime_error() -> None:
    with pytest.raises(wu.NoCurrentUnit, match="only available inside a work unit") as raised:
        wu.current()
    assert isinstance(raised.value, RuntimeError)
    assert isinstance(raised.value, wu.WorkunitsError)


def test_an_empty_mailbox_times_out_with_no_notification_also_a_timeout_error() -> None:
    mailbox = Mailbox(None)
    with pytest.raises(TimeoutError, match=r"no notification within 0\.01 s") as raised:
        mailbox.get(timeout=0.01)
    assert isinstance(raised.value, wu.NoNotification)


def test_the_async_get_times_out_the_same_way() -> None:
    mailbox = Mailbox(None)
    with pytest.raises(wu.NoNotification, match=r"no notification within 0\.01 s") as raised:
        asyncio.run(mailbox.get_async(timeout=0.01))
    assert isinstance(raised.value, TimeoutError)


def test_a_closed_empty_mailbox_raises_mailbox_closed_a_workunits_error() -> None:
    mailbox = Mailbox(None)
    mailbox.close()
    with pytest.raises(wu.WorkunitsError, match="mailbox is empty") as raised:
        mailbox.get(timeout=1)
    assert isinstance(raised.value, wu.MailboxClosed)
    assert list(mailbox) == []  # iteration still ends quietly


def test_a_clients_notices_time_out_with_no_notification(tmp_path: Path) -> None:
    with wu.connect(tmp_path / "state") as client, pytest.raises(wu.NoNotification) as raised:
        client.notifications().get(timeout=0.01)
    assert isinstance(raised.value, TimeoutError)


def test_every_error_class_is_documented_with_its_cause_in_the_reference() -> None:
    """A user meets each of them somewhere: the errors page says when, and what it means."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "errors.md").read_text()
    rows = {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", page, re.MULTILINE)}
    missing = sorted(set(drawn_tree()) - rows)
    assert not missing, f"docs/reference/errors.md has no row for {missing}"
