"""Typed identity (invariant 1): minting, the one validating regex, routing by prefix."""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import workunits as wu
from workunits import InvalidWorkId, Supervisor, UnknownKind, UnknownWork
from workunits._core.ids import ALPHABET, SUFFIX_LEN, mint, prefix_of, validate
from workunits._wire.specs import ShellSpec

ID_SHAPE = re.compile(r"[a-z][0-9a-z]{8}", re.ASCII)


def test_mint_has_the_prefix_and_eight_characters_of_the_alphabet() -> None:
    work_id = mint("b")
    assert len(work_id) == 1 + SUFFIX_LEN == 9
    assert work_id[0] == "b"
    assert set(work_id[1:]) <= set(ALPHABET)
    assert ID_SHAPE.fullmatch(work_id)


def test_minted_ids_are_unique_and_use_the_whole_alphabet() -> None:
    ids = [mint("a") for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    # 40,000 suffix characters: each of the 36 is expected ~1,100 times.
    assert set("".join(i[1:] for i in ids)) == set(ALPHABET)
    assert ALPHABET == "0123456789abcdefghijklmnopqrstuvwxyz"


def case_id(value: object) -> str:
    """A test ID that can be passed back to pytest (`make mutate` reruns tests by ID):
    no '/' (read as a path), no backslash or non-ASCII (escaped differently)."""
    if isinstance(value, type):
        return value.__name__
    return ascii(value).replace("\\", "%").replace("/", "|")


@pytest.mark.parametrize("prefix", ["", "ab", "B", "1", "é", "-", None, 7], ids=case_id)
def test_mint_refuses_a_prefix_that_is_not_one_letter(prefix: Any) -> None:
    with pytest.raises(InvalidWorkId):
        mint(prefix)


BAD_IDS: list[Any] = [
    "",
    "b",
    "b1234567",  # too short
    "b123456789",  # too long
    "B12345678",  # upper-case prefix
    "b1234567A",  # upper-case suffix
    "bABCDEFGH",
    "b1234/678",
    "b../45678",
    "..",
    "b1234\x00678",
    "b12345678\n",  # a trailing newline, which `$` would have let through
    " b12345678",
    "b1234 678",
    "b" + "".join(chr(0xFF10 + d) for d in range(1, 9)),  # fullwidth digits
    "b" + "".join(chr(0x0660 + d) for d in range(1, 9)),  # Arabic-Indic digits
    "\uff4212345678",  # a fullwidth b
    "b1234567ß",
    "1b2345678",  # prefix must be a letter
    None,
    12345678,
    b"b12345678",
    ["b12345678"],
]


@pytest.mark.parametrize("value", BAD_IDS, ids=case_id)
def test_validate_rejects(value: Any) -> None:
    with pytest.raises(InvalidWorkId):
        validate(value)
    assert not wu.is_valid_id(value)


def test_validate_returns_a_good_id_unchanged() -> None:
    assert validate("b4k2x9q0m") == "b4k2x9q0m"
    assert wu.is_valid_id("b4k2x9q0m")


def test_invalid_work_id_is_a_value_error_in_the_one_tree() -> None:
    with pytest.raises(ValueError, match="not a work unit ID"):
        validate("nope")
    assert issubclass(InvalidWorkId, wu.WorkunitsError)


@given(st.text(max_size=20))
def test_validate_accepts_exactly_the_ascii_shape(value: str) -> None:
    if ID_SHAPE.fullmatch(value):
        assert validate(value) == value
    else:
        with pytest.raises(InvalidWorkId):
            validate(value)


@given(st.from_regex(ID_SHAPE, fullmatch=True))
def test_every_valid_id_is_a_safe_path_component(value: str) -> None:
    assert validate(value) == value
    assert os.path.basename(value) == value
    assert value not in {".", ".."}
    assert value.isascii()
    assert value.isalnum()


@given(st.sampled_from("abcdefghijklmnopqrstuvwxyz"))
def test_minted_ids_always_validate(prefix: str) -> None:
    assert validate(mint(prefix)).startswith(prefix)


def test_prefix_of_routes_by_the_first_letter() -> None:
    assert prefix_of("b12345678", {"b", "x"}) == "b"


def test_unknown_prefix_is_unknown_kind() -> None:
    with pytest.raises(UnknownKind, match="'z'"):
        prefix_of("z12345678", {"b"})


def test_session_prefix_is_not_a_work_unit_id() -> None:
    with pytest.raises(InvalidWorkId, match="session"):
        prefix_of("s12345678", {"b", "s"})


# -- every public call checks the ID before it touches anything -----------------


def _true() -> ShellSpec:
    return ShellSpec.build("true", cwd=None, env=None, output_cap=1 << 20)


CALLS: dict[str, Callable[[Supervisor, Any], object]] = {
    "get": lambda s, i: s.get(i),
    "read_output": lambda s, i: s.read_output(i),
    "stream": lambda s, i: next(s.stream(i)),
    "kill": lambda s, i: s.kill(i),
    "cancel": lambda s, i: s.cancel(i, grace=1.0),
    "wait": lambda s, i: s.wait(i, timeout=1.0),
    "result": lambda s, i: s.result(i, timeout=1.0),
    "wait_async": lambda s, i: asyncio.run(s.wait_async(i, timeout=1.0)),
    "result_async": lambda s, i: asyncio.run(s.result_async(i, timeout=1.0)),
    "retain": lambda s, i: s.retain(i),
    "list(parent=)": lambda s, i: s.list(parent=i),
    "submit(parent=)": lambda s, i: s.submit("b", _true(), parent=i),
}

REJECTED: list[tuple[Any, type[Exception]]] = [
    ("", InvalidWorkId),
    ("../../etc/pw", InvalidWorkId),
    ("b1234\x00678", InvalidWorkId),
    ("B12345678", InvalidWorkId),
    (None, InvalidWorkId),
    (42, InvalidWorkId),
    ("s12345678", InvalidWorkId),  # a session ID
    ("z12345678", UnknownKind),  # well formed, but no kind 'z'
]


@pytest.mark.parametrize("call", list(CALLS), ids=str)
@pytest.mark.parametrize(("bad", "error"), REJECTED, ids=case_id)
def test_public_calls_refuse_bad_ids_before_touching_anything(
    shared_sup: Supervisor, call: str, bad: Any, error: type[Exception]
) -> None:
    if call.endswith("(parent=)") and bad is None:
        pytest.skip("parent=None means no parent")
    output_dir = Path(shared_sup.state_dir) / "output"
    with pytest.raises(error):
        CALLS[call](shared_sup, bad)
    assert shared_sup.list() == []
    assert list(output_dir.iterdir()) == []
    assert not shared_sup._waiters._waiters, "a waiter was left behind"


@pytest.mark.parametrize("call", [c for c in CALLS if c != "submit(parent=)"], ids=str)
def test_a_well_formed_id_nobody_registered_is_unknown_work(
    shared_sup: Supervisor, call: str
) -> None:
    with pytest.raises(UnknownWork):
        CALLS[call](shared_sup, mint("b"))
    assert shared_sup.list() == []


def test_ids_come_from_a_csprng_not_the_seedable_global_random() -> None:
    # An ID must not be guessable: reseeding Python's `random` must not repeat one.
    random.seed(1234)
    first = [mint("a") for _ in range(4)]
    random.seed(1234)
    second = [mint("a") for _ in range(4)]
    assert first != second


@pytest.mark.timeout(30)
def test_a_handle_given_for_an_id_says_to_pass_its_id(shared_sup: Supervisor) -> None:
    handle = shared_sup.shell(["true"])
    for call in (shared_sup.wait, shared_sup.result, shared_sup.get):
        with pytest.raises(InvalidWorkId, match=r"got a WorkHandle: pass its \.id"):
            call(handle)  # type: ignore[arg-type]
    record = handle.wait(timeout=20)  # the handle's own method works, and so does its ID
    assert shared_sup.get(handle.id).status is record.status
    with pytest.raises(InvalidWorkId, match=r"got a WorkRecord: pass its \.id"):
        shared_sup.kill(record)  # type: ignore[arg-type]
