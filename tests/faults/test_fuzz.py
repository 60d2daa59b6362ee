"""Hostile input fuzzing: every public call answers junk with its documented error.

IDs and kind letters go to every Supervisor and Client call that takes one;
the only errors allowed are InvalidWorkId, UnknownKind, UnknownWork and
SpecError. JSON arguments go through the client; junk ``requests`` rows go
straight into the ledger. After each, the supervisor is alive and still
applies good requests.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workunits as wu
from workunits import (
    InvalidWorkId,
    SpecError,
    Status,
    Supervisor,
    UnknownKind,
    UnknownWork,
)
from workunits.actors.shell import ShellActor

DOCUMENTED = (InvalidWorkId, UnknownKind, UnknownWork, SpecError)
FUZZ = settings(
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Each example of these runs a unit to its end: fewer of them.
FUZZ_UNITS = settings(FUZZ, max_examples=30)

# Near misses of the ID shape matter most: right length, wrong letters, session
# prefix, Unicode look-alikes, NULs, path tricks; plus anything at all.
id_like = st.one_of(
    st.text(alphabet="0123456789abcdefghijklmnopqrstuvwxyz", min_size=0, max_size=12),
    st.from_regex(r"[a-z][0-9a-z]{8}", fullmatch=True),
    st.from_regex(r"[a-z][0-9a-z]{8}[\n\x00/.]", fullmatch=True),
    st.sampled_from(
        ["../../etc/passwd", "s12345678", "b1234567\uff18", "\uff2212345678", "b" * 9 + "\n"]
    ),
    st.text(max_size=20),
    st.integers(),
    st.none(),
    st.binary(max_size=12),
)


@pytest.fixture(scope="module")
def fuzz_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Supervisor, Path]]:
    state = tmp_path_factory.mktemp("fuzz") / "state"
    with Supervisor(state, install_signal_handlers=False) as sup:
        yield sup, state


def _sup_calls(sup: Supervisor) -> list[Callable[[Any], object]]:
    return [
        sup.get,
        sup.read_output,
        sup.stream,
        sup.kill,
        sup.cancel,
        lambda i: sup.wait(i, timeout=0),
        lambda i: sup.result(i, timeout=0),
        sup.retain,
    ]


def _client_calls(client: wu.Client) -> list[Callable[[Any], object]]:
    return [
        client.get,
        client.row,
        client.kill,
        client.cancel,
        client.retain,
        lambda i: client.wait(i, timeout=0),
        lambda i: client.result(i, timeout=0),
        lambda i: client.stream(i, follow=False),
    ]


def _still_serving(sup: Supervisor) -> None:
    assert sup.wait(sup.shell(["true"]).id, timeout=20).status == Status.COMPLETED


@FUZZ
@given(work_id=id_like)
def test_junk_ids_get_documented_errors_from_every_supervisor_call(
    fuzz_state: tuple[Supervisor, Path], work_id: Any
) -> None:
    sup, _ = fuzz_state
    for call in _sup_calls(sup):
        with contextlib.suppress(*DOCUMENTED):
            call(work_id)


@FUZZ
@given(work_id=id_like)
def test_junk_ids_get_documented_errors_from_every_client_call(
    fuzz_state: tuple[Supervisor, Path], work_id: Any
) -> None:
    _, state = fuzz_state
    with wu.connect(state) as client:
        for call in _client_calls(client):
            with contextlib.suppress(*DOCUMENTED):
                call(work_id)


@FUZZ
@given(letter=st.one_of(st.text(max_size=3), st.integers(), st.none()))
def test_junk_kind_letters_get_documented_errors(
    fuzz_state: tuple[Supervisor, Path], letter: Any
) -> None:
    sup, _ = fuzz_state
    before = sup.resident_ids()
    with pytest.raises(DOCUMENTED):
        sup.submit(letter, object())
    try:
        sup.register_kind(letter, ShellActor)
    except (*DOCUMENTED, wu.KindTaken):
        pass
    assert sup.resident_ids() == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@FUZZ_UNITS
@given(args=st.lists(json_values, max_size=3), kwargs=st.dictionaries(st.text(), json_values))
def test_client_json_args_are_stored_or_refused_with_spec_error(
    fuzz_state: tuple[Supervisor, Path], args: list[Any], kwargs: dict[str, Any]
) -> None:
    _, state = fuzz_state
    with wu.connect(state) as client:
        try:
            handle = client.agent("tests.faults.jobs:add", *args, **kwargs)
        except (SpecError, TypeError):
            return  # TypeError: a kwarg named like a parameter of agent() itself
        # It runs (and most likely fails in add()); it never takes the supervisor down.
        assert client.wait(handle.id, timeout=30).status in (Status.COMPLETED, Status.FAILED)


@FUZZ_UNITS
@given(
    verb=st.one_of(st.text(max_size=12), st.sampled_from(["cancel", "kill", "retain", "submit"])),
    target=id_like.filter(lambda v: isinstance(v, str | bytes | int) or v is None),
    args=st.one_of(
        st.text(max_size=20), st.binary(max_size=20), st.none(), st.just('{"grace":-1}')
    ),
)
def test_junk_request_rows_do_not_stop_the_supervisor(
    fuzz_state: tuple[Supervisor, Path], verb: str, target: Any, args: Any
) -> None:
    sup, state = fuzz_state
    db = sqlite3.connect(state / "ledger.db", timeout=10)
    try:
        with db:
            db.execute(
                "INSERT INTO requests (verb, target, args, created_at) VALUES (?, ?, ?, 0)",
                (verb, target, args),
            )
    except (sqlite3.IntegrityError, OverflowError):
        # The schema refuses it, or SQLite cannot hold it (an int past 64 bits):
        # nothing reaches the supervisor.
        return
    finally:
        db.close()
    # A good request after the junk is still applied.
    with wu.connect(state) as client:
        unit = sup.shell(["sleep", "30"])
        seq = client.request("kill", unit.id)
        assert seq is not None
        result = client.request_result(seq, timeout=20)
        assert result is not None
        assert result["changed"] is True
        assert sup.wait(unit.id, timeout=20).status == Status.KILLED


def test_the_supervisor_is_still_serving_after_the_fuzzing(
    fuzz_state: tuple[Supervisor, Path],
) -> None:
    _still_serving(fuzz_state[0])
