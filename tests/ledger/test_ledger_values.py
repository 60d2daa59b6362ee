"""Specs: import references where they resolve back, signed pickles otherwise, never
running a value whose signature fails."""

from __future__ import annotations

import dataclasses
import operator
import os
import pathlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.ledger.support import new_unit, raw, start
from workunits._core import ids as _ids
from workunits._core.errors import LedgerCorrupt, SpecError
from workunits._ledger import (
    Call,
    Ledger,
    LedgerTampered,
    NewUnit,
    Stored,
    ValueVersionMismatch,
    values,
)
from workunits._wire.specs import import_ref, resolve_ref


def module_level(x: int) -> int:
    return x + 1


def _make_closure() -> Any:
    offset = 5

    def inner(x: int) -> int:
        return x + offset

    return inner


class Toucher:
    """Unpickling it creates a file: proof that a pickle did (or did not) run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (self.marker,))


def _store(ledger: Ledger, spec: object) -> str:
    work_id = _ids.mint("a")
    ledger.units.submit(NewUnit(work_id, "agent", ledger.units.encode_spec(spec, work_id), 1.0))
    return work_id


def _poke(ledger: Ledger, work_id: str, **columns: object) -> None:
    """Change columns behind the ledger's back, as an attacker with the file would."""
    with raw(ledger) as conn:
        assignments = ", ".join(f"{name} = ?" for name in columns)
        conn.execute(f"UPDATE units SET {assignments} WHERE id = ?", (*columns.values(), work_id))  # noqa: S608


def test_an_importable_function_is_stored_as_a_reference(ledger: Ledger) -> None:
    work_id = _store(ledger, Call(operator.add, (1, 2), {}))
    row = ledger.units.require(work_id)
    assert row.spec is not None
    assert row.spec.format == "ref"
    assert b'"ref":"_operator:add"' in row.spec.data
    loaded = ledger.units.load_spec(work_id)
    assert loaded == Call(operator.add, (1, 2), {})


@pytest.mark.parametrize(
    "fn",
    [lambda x: x, _make_closure(), Toucher.__init__.__get__(object())],
    ids=["lambda", "closure", "bound-method"],  # the same in every process (no addresses)
)
def test_what_has_no_reference_is_pickled_and_loads_back(ledger: Ledger, fn: Any) -> None:
    work_id = _store(ledger, Call(fn, (1,)))
    row = ledger.units.require(work_id)
    assert row.spec is not None
    assert row.spec.format == "pickle"
    assert row.spec.versions == values.versions()


def test_a_closure_round_trips_through_its_pickle(ledger: Ledger) -> None:
    work_id = _store(ledger, Call(_make_closure(), (1,)))
    loaded = ledger.units.load_spec(work_id)
    assert isinstance(loaded, Call)
    assert callable(loaded.fn)
    assert loaded.fn(*loaded.args) == 6


def test_a_reference_that_resolves_to_another_object_is_not_used() -> None:
    def impostor(x: int) -> int:
        return x

    impostor.__module__ = __name__
    impostor.__qualname__ = "module_level"  # resolves, but to the real module_level
    assert import_ref(impostor) is None
    assert import_ref(module_level) == f"{__name__}:module_level"


def test_a_function_whose_name_is_past_ascii_is_no_reference() -> None:
    def named() -> None: ...

    named.__module__ = __name__
    named.__qualname__ = "jméno"  # Python takes it; an import reference does not
    globals()["jméno"] = named
    try:
        assert import_ref(named) is None
    finally:
        del globals()["jméno"]


def test_main_module_functions_are_not_references() -> None:
    def in_main() -> None: ...

    in_main.__module__ = "__main__"
    in_main.__qualname__ = "in_main"
    assert import_ref(in_main) is None


def test_reference_arguments_that_are_not_exact_json_fall_back_to_a_pickle(
    ledger: Ledger,
) -> None:
    work_id = _store(ledger, Call(operator.add, ((1, 2), (3,))))
    row = ledger.units.require(work_id)
    assert row.spec is not None
    assert row.spec.format == "pickle"
    assert ledger.units.load_spec(work_id) == Call(operator.add, ((1, 2), (3,)), {})


def test_plain_data_specs_are_json(ledger: Ledger) -> None:
    work_id = _store(ledger, {"argv": ["true"], "cwd": None})
    row = ledger.units.require(work_id)
    assert row.spec is not None
    assert row.spec.format == "json"
    assert ledger.units.load_spec(work_id) == {"argv": ["true"], "cwd": None}


def test_resolve_ref_says_what_is_wrong() -> None:
    with pytest.raises(SpecError, match="not an import reference"):
        resolve_ref("no colon")
    with pytest.raises(SpecError, match="cannot import"):
        resolve_ref("no_such_module_xyz:f")
    with pytest.raises(SpecError, match="has no 'nope'"):
        resolve_ref("operator:nope")


def test_a_tampered_pickle_is_refused_and_never_runs(ledger: Ledger, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    honest = _store(ledger, Toucher(marker))
    ledger.units.load_spec(honest)  # the untampered pickle does run: the marker proves it
    assert marker.exists()
    marker.unlink()

    work_id = _store(ledger, Toucher(marker))
    row = ledger.units.require(work_id)
    assert row.spec is not None
    assert row.spec.format == "pickle"
    flipped = bytearray(row.spec.data)
    flipped[-2] ^= 0x01
    _poke(ledger, work_id, spec=bytes(flipped))
    with pytest.raises(LedgerTampered, match=f"unit {work_id}.*integrity"):
        ledger.units.load_spec(work_id)
    assert not marker.exists()


def test_a_pickle_signed_by_another_state_dir_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with Ledger(tmp_path / "one") as one, Ledger(tmp_path / "two") as two:
        work_id = _store(one, Toucher(marker))
        row = one.units.require(work_id)
        assert row.spec is not None
        two.units.submit(NewUnit(work_id, "agent", row.spec, 1.0))
        with pytest.raises(LedgerTampered):
            two.units.load_spec(work_id)
    assert not marker.exists()


def test_a_reference_rewritten_to_run_something_else_is_refused(
    ledger: Ledger, tmp_path: Path
) -> None:
    work_id = _store(ledger, Call(operator.add, (1, 2)))
    evil = (
        b'{"args":["touch ' + str(tmp_path / "ran").encode() + b'"],"kwargs":{},"ref":"os:system"}'
    )
    _poke(ledger, work_id, spec=evil)
    with pytest.raises(LedgerTampered):
        ledger.units.load_spec(work_id)


def test_a_spec_moved_to_another_unit_is_refused(ledger: Ledger) -> None:
    first = _store(ledger, Call(_make_closure(), (1,)))
    second = _store(ledger, Call(_make_closure(), (2,)))
    spec = ledger.units.require(first).spec
    assert spec is not None
    _poke(ledger, second, spec=spec.data, spec_mac=spec.mac)
    with pytest.raises(LedgerTampered):
        ledger.units.load_spec(second)


def test_a_pickle_from_other_versions_is_refused_with_both_named(
    ledger: Ledger, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    work_id = _store(ledger, Toucher(marker))
    row = ledger.units.require(work_id)
    assert row.spec is not None
    older = values.versions().replace("python 3.", "python 2.")
    key = (ledger.state_dir / values.KEY_FILE).read_bytes()
    mac = values.mac_of(
        key, purpose="spec", work_id=work_id, fmt="pickle", versions=older, data=row.spec.data
    )
    _poke(ledger, work_id, spec_versions=older, spec_mac=mac)
    with pytest.raises(ValueVersionMismatch) as caught:
        ledger.units.load_spec(work_id)
    assert older in str(caught.value)
    assert values.versions() in str(caught.value)
    assert "module:qualname" in str(caught.value)
    assert not marker.exists()


def test_a_tampered_pickled_result_is_refused(ledger: Ledger, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    unit = new_unit(ledger)
    ledger.attempts.write(unit.id, attempt=1, status="running")
    ledger.attempts.write(unit.id, attempt=1, status="completed", result=Toucher(marker))
    stored = ledger.units.require(unit.id).result
    assert stored is not None
    _poke(ledger, unit.id, result=stored.data + b".")
    with pytest.raises(LedgerTampered):
        ledger.units.load_result(unit.id)
    assert not marker.exists()


def test_the_spec_hash_ignores_keyword_order_and_the_unit_id(ledger: Ledger) -> None:
    def stored(kwargs: dict[str, int]) -> Stored:
        return ledger.units.encode_spec(Call(dict, (), kwargs), _ids.mint("a"))

    a, b = stored({"x": 1, "y": 2}), stored({"y": 2, "x": 1})
    assert a.mac != b.mac  # bound to different unit IDs
    assert values.spec_hash("agent", a) == values.spec_hash("agent", b)
    assert values.spec_hash("agent", a) != values.spec_hash("shell", a)
    assert values.spec_hash("agent", a) != values.spec_hash("agent", stored({"x": 2, "y": 2}))


def test_the_spec_hash_is_the_same_in_another_process(ledger: Ledger) -> None:
    here = values.spec_hash(
        "agent", ledger.units.encode_spec(Call(operator.add, (1, 2)), "a00000000")
    )
    code = (
        "import operator, sys\n"
        "from pathlib import Path\n"
        "from workunits._ledger import Ledger, Call\n"
        "from workunits._ledger import values\n"
        "with Ledger(Path(sys.argv[1])) as ledger:\n"
        "    spec = ledger.units.encode_spec(Call(operator.add, (1, 2)), 'a11111111')\n"
        "    print(values.spec_hash('agent', spec))\n"
    )
    there = subprocess.run(
        [sys.executable, "-c", code, str(ledger.state_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.strip()
    assert there == here


def test_stored_values_are_frozen() -> None:
    stored = Stored("json", b"1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.format = "pickle"  # type: ignore[misc]


def test_a_refused_submit_in_a_batch_leaves_no_large_spec_file(tmp_path: Path) -> None:
    """A unit the ledger refuses (here a NUL in its description) is refused before its
    large spec is written to ``values/``; the good unit beside it keeps its file."""
    with Ledger(tmp_path / "state", large_value=1024) as ledger:
        news = []
        for description in ("fine", "bad\x00"):
            work_id = _ids.mint("a")
            spec = ledger.units.encode_spec(Call(operator.add, ("x" * 4096, "y")), work_id)
            news.append(
                NewUnit(work_id, "agent", spec, 1.0, description=description, resumable=True)
            )
        good, refused = ledger.units.submit_many(news)
        assert isinstance(refused, SpecError)
        assert "NUL" in str(refused)
        assert not isinstance(good, BaseException)
        row, created = good
        assert created
        assert row.spec is not None
        assert row.spec.file is not None
        files = sorted(p.name for p in (tmp_path / "state" / "values").iterdir())
        assert files == [row.spec.file]


def test_a_checkpoint_replaced_while_its_row_is_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer checkpoint saved between a reader's row and its load of the older one's
    file (which that save removes) is no lost value: the reader reads the row again.
    The interleaving is made at the load itself; a file gone for good still fails."""
    with Ledger(tmp_path / "state", large_value=64) as ledger:
        unit = new_unit(ledger, max_attempts=3)
        start(ledger, unit.id)
        assert ledger.attempts.save_checkpoint(unit.id, 1, {"n": "a" * 200})
        large = ledger.units._ctx.large
        real_load = large.load
        raced: list[str | None] = []

        def load(stored: Any, *, purpose: str, work_id: str) -> Any:
            if purpose == "checkpoint" and not raced:
                raced.append(stored.file)  # a writer gets in between, as in a real race
                assert ledger.attempts.save_checkpoint(unit.id, 1, {"n": "b" * 200})
            return real_load(stored, purpose=purpose, work_id=work_id)

        monkeypatch.setattr(large, "load", load)
        row = ledger.units.require(unit.id)
        assert len(raced) == 1  # the first read's file was the older one, replaced
        assert row.checkpoint is not None
        assert orjson.loads(row.checkpoint) == {"n": "b" * 200}
        monkeypatch.undo()

        for value in (tmp_path / "state" / "values").iterdir():
            value.unlink()  # gone for good: the same reference missing twice
        with pytest.raises(LedgerCorrupt, match="cannot be read"):
            ledger.units.require(unit.id)
